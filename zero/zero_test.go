package zero

import (
	"context"
	"math/rand/v2"
	"testing"

	"github.com/cohortml/cohort/autograd"
	"github.com/cohortml/cohort/distributed"
	"github.com/cohortml/cohort/internal/dp/dptest"
	"github.com/cohortml/cohort/models"
	"github.com/cohortml/cohort/nn"
	"github.com/cohortml/cohort/optim"
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

const globalBatch = dptest.GlobalBatch

func imageWorkload(name string, build func(*rand.Rand) *nn.Sequential, shape []int) workload {
	return workload{name: name,
		model: func() nn.Module { return build(rand.New(rand.NewPCG(1, 2))) },
		batch: func(mod nn.Module, s, lo, hi int) (func() *autograd.Var, func(*autograd.Var) *autograd.Var) {
			xs, ys := dptest.Images(s, 7, lo, hi, shape)
			x := autograd.NewVar(xs, false)
			return func() *autograd.Var { return mod.(nn.Layer).Forward(x) },
				func(out *autograd.Var) *autograd.Var {
					return autograd.CrossEntropy(out, ys, autograd.CrossEntropyOptions{})
				}
		}}
}

func gptWorkload() workload {
	const T = 8
	return workload{name: "gpt-mini",
		model: func() nn.Module { return dptest.NewGPT(rand.New(rand.NewPCG(3, 4)), models.GPTMini()) },
		batch: func(mod nn.Module, s, lo, hi int) (func() *autograd.Var, func(*autograd.Var) *autograd.Var) {
			idx, tgt := dptest.Tokens(s, lo, hi, T, 256)
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
	return dptest.Params(mod)
}

// wrapNew wraps a new model of w on pg, failing t on an error.
func wrapNew(t testing.TB, ctx context.Context, w workload, pg distributed.ProcessGroup, o Options) (nn.Module, *Model) {
	t.Helper()
	mod := w.model()
	m, err := Wrap(ctx, mod, pg, o)
	if err != nil {
		t.Fatal(err)
	}
	return mod, m
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
	if err := trainSteps(ctx, w, m, mod, pg, 0, steps, plainBackward); err != nil {
		return nil, nil, err
	}
	return dptest.Params(mod), m, nil
}

// trainSteps trains m, wrapping mod, through steps [from, to) of w on this
// rank's rows of the global batch, clipping every step.
func trainSteps(ctx context.Context, w workload, m *Model, mod nn.Module, pg distributed.ProcessGroup, from, to int, plainBackward bool) error {
	n, r := pg.Size(), pg.Rank()
	for s := from; s < to; s++ {
		fwd, loss := w.batch(mod, s, r*globalBatch/n, (r+1)*globalBatch/n)
		out, err := m.Call(ctx, fwd)
		if err != nil {
			return err
		}
		if plainBackward {
			autograd.Backward(loss(out))
		} else if err := m.Backward(ctx, loss(out)); err != nil {
			return err
		}
		if err := dptest.ClipStep(ctx, m, maxNorm); err != nil {
			return err
		}
	}
	return nil
}
