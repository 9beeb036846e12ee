package models

import (
	"math/rand/v2"
	"testing"

	"github.com/cohortml/cohort/autograd"
	"github.com/cohortml/cohort/nn"
	"github.com/cohortml/cohort/tensor"
)

// BenchmarkTrainStep measures one training step of the anchor workloads
// (batch 64: forward, cross-entropy, backward, plain SGD update) on
// synthetic data, reporting samples/s.
func BenchmarkTrainStep(b *testing.B) {
	for _, tc := range []struct {
		name  string
		build func(*rand.Rand) *nn.Sequential
		shape []int
	}{
		{"mlp", MLP, []int{64, 784}},
		{"cnn", LeNet, []int{64, 1, 28, 28}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			rng := rand.New(rand.NewPCG(1, 2))
			m := tc.build(rng)
			x := tensor.New(tc.shape...)
			x.FillNormal(rng, 0, 1)
			y := make([]int64, 64)
			for i := range y {
				y[i] = int64(rng.IntN(10))
			}
			params := nn.Parameters(m)
			for b.Loop() {
				nn.ZeroGrad(m)
				loss := nn.CrossEntropy(m.Forward(autograd.NewVar(x, false)), y)
				autograd.Backward(loss)
				for _, p := range params {
					tensor.AddScaled(p.Value, -0.01, p.Grad)
				}
			}
			b.ReportMetric(float64(64*b.N)/b.Elapsed().Seconds(), "samples/s")
		})
	}
}

// BenchmarkGPTMiniStep measures forward, loss and backward of GPT-mini on
// a batch of 32 sequences of 64 tokens, reporting tokens/s: in one pass
// (batch32), and accumulated over 8 microbatches of 4 sequences (mb8x4,
// what cohort bench pipeline's one-stage baseline runs). With -benchmem,
// B/op is what a steady-state step allocates.
func BenchmarkGPTMiniStep(b *testing.B) {
	for _, mb := range []int{1, 8} {
		name := "batch32"
		if mb > 1 {
			name = "mb8x4"
		}
		b.Run(name, func(b *testing.B) {
			rng := rand.New(rand.NewPCG(1, 2))
			g, err := NewGPT(rng, GPTMini())
			if err != nil {
				b.Fatal(err)
			}
			const B, T = 32, 64
			idx, tgt := make([]int64, B*T), make([]int64, B*T)
			for i := range idx {
				idx[i], tgt[i] = int64(rng.IntN(256)), int64(rng.IntN(256))
			}
			n := B / mb * T
			for b.Loop() {
				nn.ZeroGrad(g)
				for m := range mb {
					autograd.Backward(g.Loss(g.Forward(idx[m*n:(m+1)*n], B/mb, T), tgt[m*n:(m+1)*n]))
				}
			}
			b.ReportMetric(float64(B*T*b.N)/b.Elapsed().Seconds(), "tokens/s")
		})
	}
}
