package tensor

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestBFloat16Conversions: ToBFloat16 rounds to nearest even, as the
// formula below does, on lengths around the vector blocks; FromBFloat16
// widens back exactly.
func TestBFloat16Conversions(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, n := range []int{0, 1, 15, 16, 31, 32, 33, 100} {
		src := make([]float32, n)
		for i := range src {
			src[i] = math.Float32frombits(rng.Uint32())
			if src[i] != src[i] {
				src[i] = float32(rng.NormFloat64())
			}
		}
		h := make([]uint16, n+1)
		ToBFloat16(h, src)
		back := make([]float32, n)
		FromBFloat16(back, h[:n])
		for i, v := range src {
			u := math.Float32bits(v)
			want := uint16((u + 0x7fff + (u>>16)&1) >> 16)
			if h[i] != want {
				t.Fatalf("n=%d: ToBFloat16(%g) = %#04x, want %#04x", n, v, h[i], want)
			}
			if math.Float32bits(back[i]) != uint32(want)<<16 {
				t.Fatalf("n=%d: FromBFloat16(%#04x) = %#08x", n, want, math.Float32bits(back[i]))
			}
		}
	}
}
