package zero

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/cohortml/cohort/autograd"
	"github.com/cohortml/cohort/distributed"
	"github.com/cohortml/cohort/models"
	"github.com/cohortml/cohort/nn"
	"github.com/cohortml/cohort/optim"
	"github.com/cohortml/cohort/tensor"
)

// A workload is a model and a deterministic global batch per step; rank r
// of N trains on rows [r·G/N, (r+1)·G/N).
type workload struct {
	name  string
	model func() nn.Module
	// batch returns the forward pass over rows [lo, hi) of step s's batch
	// through mod, and the loss of its output.
	batch func(mod nn.Module, s, lo, hi int) (func() *autograd.Var, func(*autograd.Var) *autograd.Var)
}

const globalBatch = 12 // divisible by every world size tested

func imageWorkload(name string, build func(*rand.Rand) *nn.Sequential, shape []int) workload {
	return workload{name: name,
		model: func() nn.Module { return build(rand.New(rand.NewPCG(1, 2))) },
		batch: func(mod nn.Module, s, lo, hi int) (func() *autograd.Var, func(*autograd.Var) *autograd.Var) {
			rng := rand.New(rand.NewPCG(uint64(s), 7))
			per := 1
			for _, d := range shape {
				per *= d
			}
			xs := make([]float32, globalBatch*per)
			for i := range xs {
				xs[i] = float32(rng.NormFloat64())
			}
			ys := make([]int64, globalBatch)
			for i := range ys {
				ys[i] = int64(rng.IntN(10))
			}
			x := autograd.NewVar(tensor.FromSlice(xs[lo*per:hi*per], append([]int{hi - lo}, shape...)...), false)
			return func() *autograd.Var { return mod.(nn.Layer).Forward(x) },
				func(out *autograd.Var) *autograd.Var {
					return autograd.CrossEntropy(out, ys[lo:hi], autograd.CrossEntropyOptions{})
				}
		}}
}

func gptWorkload() workload {
	const T = 8
	return workload{name: "gpt-mini",
		model: func() nn.Module {
			g, err := models.NewGPT(rand.New(rand.NewPCG(3, 4)), models.GPTMini())
			if err != nil {
				panic(err)
			}
			return g
		},
		batch: func(mod nn.Module, s, lo, hi int) (func() *autograd.Var, func(*autograd.Var) *autograd.Var) {
			rng := rand.New(rand.NewPCG(uint64(s), 9))
			toks := make([]int64, globalBatch*(T+1))
			for i := range toks {
				toks[i] = int64(rng.IntN(256))
			}
			var idx, tgt []int64
			for b := lo; b < hi; b++ {
				row := toks[b*(T+1) : (b+1)*(T+1)]
				idx = append(idx, row[:T]...)
				tgt = append(tgt, row[1:]...)
			}
			g := mod.(*models.GPT)
			return func() *autograd.Var { return g.Forward(idx, hi-lo, T) },
				func(out *autograd.Var) *autograd.Var { return g.Loss(out, tgt) }
		}}
}

func workloads() []workload {
	return []workload{
		imageWorkload("mlp", models.MLP, []int{784}),
		imageWorkload("cnn", models.LeNet, []int{1, 28, 28}),
		gptWorkload(),
	}
}

const (
	lr      = 1e-3
	wd      = 0.1
	maxNorm = 0.5
)

func adamW(ps []nn.NamedParameter) (optim.Optimizer, error) {
	return optim.NewAdamW([]optim.Group{{Params: Vars(ps), LR: lr, WeightDecay: wd}}, optim.AdamDefaults())
}

func snapshot(m nn.Module) [][]float32 {
	var out [][]float32
	for _, p := range m.NamedParameters() {
		out = append(out, append([]float32(nil), p.Param.Value.Data()...))
	}
	return out
}

// reference trains the workload in one process on the whole batch.
func reference(t *testing.T, w workload, steps int) [][]float32 {
	t.Helper()
	mod := w.model()
	opt, err := adamW(mod.NamedParameters())
	if err != nil {
		t.Fatal(err)
	}
	for s := range steps {
		fwd, loss := w.batch(mod, s, 0, globalBatch)
		autograd.Backward(loss(fwd()))
		if _, err := optim.ClipGradNorm(nn.Parameters(mod), maxNorm, 2); err != nil {
			t.Fatal(err)
		}
		opt.Step()
		opt.ZeroGrad()
	}
	return snapshot(mod)
}

// trainZero trains with zero on one rank; plainBackward uses
// autograd.Backward instead of Model.Backward.
func trainZero(ctx context.Context, w workload, pg distributed.ProcessGroup, o Options, steps int, plainBackward bool) ([][]float32, *Model, error) {
	mod := w.model()
	o.Optimizer = adamW
	m, err := Wrap(ctx, mod, pg, o)
	if err != nil {
		return nil, nil, err
	}
	n, r := pg.Size(), pg.Rank()
	for s := range steps {
		fwd, loss := w.batch(mod, s, r*globalBatch/n, (r+1)*globalBatch/n)
		out, err := m.Call(ctx, fwd)
		if err != nil {
			return nil, nil, err
		}
		if plainBackward {
			autograd.Backward(loss(out))
		} else if err := m.Backward(ctx, loss(out)); err != nil {
			return nil, nil, err
		}
		if _, err := m.ClipGradNorm(ctx, maxNorm, 2); err != nil {
			return nil, nil, err
		}
		if err := m.Step(ctx); err != nil {
			return nil, nil, err
		}
		m.ZeroGrad()
	}
	return snapshot(mod), m, nil
}

// compare reports the first parameter element outside float32 rounding
// of want (relative 1e-4, absolute 2e-5, as ddp's equivalence tests).
func compare(got, want [][]float32) error {
	for i := range want {
		for j := range want[i] {
			g, w := float64(got[i][j]), float64(want[i][j])
			if math.Abs(g-w) > 2e-5+1e-4*math.Abs(w) {
				return fmt.Errorf("parameter %d element %d: %v, want %v", i, j, g, w)
			}
		}
	}
	return nil
}

// compareNorm reports the first parameter whose difference from want has
// a norm above 5e-4 of want's: trajectories that agree to float32
// rounding (Adam magnifies rounding differences in elements whose second
// moment is tiny, so single elements may drift further).
func compareNorm(got, want [][]float32) error {
	for i := range want {
		var d, n float64
		for j := range want[i] {
			e := float64(got[i][j]) - float64(want[i][j])
			d += e * e
			n += float64(want[i][j]) * float64(want[i][j])
		}
		if math.Sqrt(d) > 5e-4*math.Sqrt(n)+1e-6 {
			return fmt.Errorf("parameter %d: difference norm %g, parameter norm %g", i, math.Sqrt(d), math.Sqrt(n))
		}
	}
	return nil
}
