package tensor

import (
	"math/rand/v2"
	"testing"
)

// BenchmarkAttention times GPT-mini's attention (a batch of 32 sequences
// of 64 tokens, width 128, 4 causal heads): the forward pass, and the
// backward pass from its saved probabilities.
func BenchmarkAttention(b *testing.B) {
	const B, T, d, heads = 32, 64, 128, 4
	rng := rand.New(rand.NewPCG(1, 2))
	qkv, dy := New(B, T, 3*d), New(B, T, d)
	qkv.FillNormal(rng, 0, 1)
	dy.FillNormal(rng, 0, 1)
	b.Run("forward", func(b *testing.B) {
		for b.Loop() {
			AttentionQKV(qkv, heads, true)
		}
	})
	_, p := AttentionQKV(qkv, heads, true)
	b.Run("backward", func(b *testing.B) {
		for b.Loop() {
			AttentionQKVBackward(dy, qkv, p, heads, true)
		}
	})
}
