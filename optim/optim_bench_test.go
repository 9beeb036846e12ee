package optim_test

import (
	"math/rand/v2"
	"testing"

	"github.com/cohortml/cohort/autograd"
	"github.com/cohortml/cohort/optim"
	"github.com/cohortml/cohort/tensor"
)

// benchParam returns a parameter of n elements with a gradient.
func benchParam(n int) *autograd.Var {
	rng := rand.New(rand.NewPCG(1, 2))
	p := autograd.NewVar(tensor.FromSlice(randSlice(rng, n, 1), n), true)
	p.Grad = tensor.FromSlice(randSlice(rng, n, 1e-2), n)
	return p
}

// BenchmarkStep measures one optimizer step over 1M parameters; the
// elems/ns metric is parameters updated per nanosecond.
func BenchmarkStep(b *testing.B) {
	const n = 1 << 20
	adamw := optim.AdamDefaults()
	ams := adamw
	ams.AMSGrad = true
	for _, bc := range []struct {
		name string
		make func([]optim.Group) (optim.Optimizer, error)
	}{
		{"sgd", func(g []optim.Group) (optim.Optimizer, error) { return optim.NewSGD(g, optim.SGDOptions{}) }},
		{"sgd_momentum", func(g []optim.Group) (optim.Optimizer, error) {
			return optim.NewSGD(g, optim.SGDOptions{Momentum: 0.9})
		}},
		{"adam", func(g []optim.Group) (optim.Optimizer, error) { return optim.NewAdam(g, optim.AdamDefaults()) }},
		{"adamw", func(g []optim.Group) (optim.Optimizer, error) { return optim.NewAdamW(g, adamw) }},
		{"adamw_amsgrad", func(g []optim.Group) (optim.Optimizer, error) { return optim.NewAdamW(g, ams) }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			p := benchParam(n)
			opt, err := bc.make([]optim.Group{{Params: []*autograd.Var{p}, LR: 1e-3, WeightDecay: 0.01}})
			if err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				opt.Step()
			}
			b.ReportMetric(float64(n)*float64(b.N)/float64(b.Elapsed().Nanoseconds()), "elems/ns")
		})
	}
}

func BenchmarkClipGradNorm(b *testing.B) {
	const n = 1 << 20
	ps := []*autograd.Var{benchParam(n)}
	for b.Loop() {
		if _, err := optim.ClipGradNorm(ps, 1e9, 2); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(n)*float64(b.N)/float64(b.Elapsed().Nanoseconds()), "elems/ns")
}
