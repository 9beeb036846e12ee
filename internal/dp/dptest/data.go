package dptest

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/cohortml/cohort/autograd"
	"github.com/cohortml/cohort/models"
	"github.com/cohortml/cohort/nn"
	"github.com/cohortml/cohort/optim"
	"github.com/cohortml/cohort/tensor"
)

// The deterministic data and the comparisons the suite trains and checks
// with, exported for the wrappers' own tests, which train larger models
// (models.MLP, models.LeNet, GPT-mini) on the same kind of batches.

// GlobalBatch is the rows of every step's global batch: divisible by every
// world size tested.
const GlobalBatch = globalBatch

// Images returns rows [lo, hi) of step s's global batch of GlobalBatch
// images of the given shape (standard normal pixels, drawn from
// PCG(s, stream)) and their labels in [0, 10).
func Images(s int, stream uint64, lo, hi int, shape []int) (*tensor.Tensor, []int64) {
	rng := rand.New(rand.NewPCG(uint64(s), stream))
	per := 1
	for _, d := range shape {
		per *= d
	}
	xs := make([]float32, GlobalBatch*per)
	for i := range xs {
		xs[i] = float32(rng.NormFloat64())
	}
	ys := make([]int64, GlobalBatch)
	for i := range ys {
		ys[i] = int64(rng.IntN(10))
	}
	return tensor.FromSlice(xs[lo*per:hi*per], append([]int{hi - lo}, shape...)...), ys[lo:hi]
}

// Tokens returns the inputs and targets of rows [lo, hi) of step s's
// global batch of GlobalBatch sequences of T+1 tokens below vocab (drawn
// from PCG(s, 9)); the targets are the inputs shifted by one.
func Tokens(s, lo, hi, T, vocab int) (idx, tgt []int64) {
	rng := rand.New(rand.NewPCG(uint64(s), 9))
	toks := make([]int64, GlobalBatch*(T+1))
	for i := range toks {
		toks[i] = int64(rng.IntN(vocab))
	}
	for b := lo; b < hi; b++ {
		row := toks[b*(T+1) : (b+1)*(T+1)]
		idx = append(idx, row[:T]...)
		tgt = append(tgt, row[1:]...)
	}
	return idx, tgt
}

// WithSide is an MLP beside a side layer that a forward pass may leave
// out (FindUnusedParameters): the buffer its gradient would go to is not
// zeroed between steps, so a step that leaves it out must reduce zeros.
type WithSide struct {
	Seq  *nn.Sequential
	Side *nn.Linear
}

func (m *WithSide) NamedParameters() []nn.NamedParameter {
	return nn.ChildParameters(nn.Child{Name: "mlp", Module: m.Seq}, nn.Child{Name: "side", Module: m.Side})
}
func (m *WithSide) NamedBuffers() []nn.NamedBuffer { return nil }
func (m *WithSide) SetTraining(on bool)            { m.Seq.SetTraining(on) }

// AddSide adds the side layer's output on x to out at odd steps s: steps
// 1 and 3 use the side layer, 0 and 2 leave it out.
func (m *WithSide) AddSide(s int, x, out *autograd.Var) *autograd.Var {
	if s%2 == 1 {
		out = autograd.Add(out, m.Side.Forward(x))
	}
	return out
}

// Forward is m's forward pass at step s.
func (m *WithSide) Forward(s int, x *autograd.Var) *autograd.Var {
	return m.AddSide(s, x, m.Seq.Forward(x))
}

// TrainSide trains a WithSide of 784 inputs steps steps on rows [lo, hi)
// of its batches (Images stream 11): call runs step s's forward pass on x
// through the wrapper, backward the backward pass of the loss, and update
// clips and steps. It returns the first error, naming the step.
func TrainSide(steps, lo, hi int, call func(s int, x *autograd.Var) (*autograd.Var, error),
	backward func(loss *autograd.Var) error, update func() error) error {
	for s := range steps {
		xs, ys := Images(s, 11, lo, hi, []int{784})
		out, err := call(s, autograd.NewVar(xs, false))
		if err != nil {
			return fmt.Errorf("step %d: %w", s, err)
		}
		if err := backward(autograd.CrossEntropy(out, ys, autograd.CrossEntropyOptions{})); err != nil {
			return fmt.Errorf("step %d: %w", s, err)
		}
		if err := update(); err != nil {
			return fmt.Errorf("step %d: %w", s, err)
		}
	}
	return nil
}

// Params copies m's parameters, in m's order.
func Params(m nn.Module) [][]float32 {
	var out [][]float32
	for _, p := range m.NamedParameters() {
		out = append(out, append([]float32(nil), p.Param.Value.Data()...))
	}
	return out
}

// CompareElements reports the first parameter element outside float32
// rounding of want (relative 1e-4, absolute 2e-5, as ddp's equivalence
// tests).
func CompareElements(got, want [][]float32) error {
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

// CompareNorms reports the first parameter whose difference from want has
// a norm above 5e-4 of want's: trajectories that agree to float32
// rounding (Adam magnifies rounding differences in elements whose second
// moment is tiny, so single elements may drift further).
func CompareNorms(got, want [][]float32) error {
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

// NewGPT builds a GPT of cfg from rng, panicking on a bad cfg (the
// workloads' configurations are constants).
func NewGPT(rng *rand.Rand, cfg models.GPTConfig) *models.GPT {
	g, err := models.NewGPT(rng, cfg)
	if err != nil {
		panic(err)
	}
	return g
}

// GPTUnits are a GPT's blocks: the units a sharded wrapper gathers one at
// a time (the embeddings and the final LayerNorm form the root).
func GPTUnits(mod nn.Module) []nn.Module {
	var us []nn.Module
	for _, b := range mod.(*models.GPT).Blocks {
		us = append(us, b)
	}
	return us
}

// GPTForward is g's forward pass over B sequences of T ids with each block
// run as a unit.
func GPTForward(g *models.GPT, idx []int64, B, T int) Forward {
	return func(run RunUnit) *autograd.Var {
		h := autograd.Add(autograd.Embedding(g.Wte, idx, B, T), autograd.Narrow(g.Wpe, 0, 0, T))
		for i, b := range g.Blocks {
			h = run(i, h, b.Forward)
		}
		return autograd.Linear(g.LNF.Forward(h), g.Wte, nil)
	}
}

// Synced is a replicated data-parallel model (ddp's) as SideReference
// drives it.
type Synced interface {
	Call(ctx context.Context, forward func() *autograd.Var) (*autograd.Var, error)
	Backward(ctx context.Context, loss *autograd.Var) error
}

// SideReference trains ref wrapped by wrap (ddp with
// FindUnusedParameters) under TrainSide, with newOpt's optimizer stepping
// after clipping to a 2-norm of maxNorm, and returns its parameters: what
// a sharded wrapper must give. It fails t on an error.
func SideReference(t testing.TB, ctx context.Context, ref *WithSide, wrap func(*WithSide) (Synced, error),
	newOpt func([]nn.NamedParameter) (optim.Optimizer, error), maxNorm float64, steps, lo, hi int) [][]float32 {
	t.Helper()
	d, err := wrap(ref)
	if err != nil {
		t.Fatal(err)
	}
	opt, err := newOpt(ref.NamedParameters())
	if err != nil {
		t.Fatal(err)
	}
	err = TrainSide(steps, lo, hi, func(s int, x *autograd.Var) (*autograd.Var, error) {
		return d.Call(ctx, func() *autograd.Var { return ref.Forward(s, x) })
	}, func(loss *autograd.Var) error { return d.Backward(ctx, loss) }, func() error {
		if _, err := optim.ClipGradNorm(nn.Parameters(ref), maxNorm, 2); err != nil {
			return err
		}
		opt.Step()
		opt.ZeroGrad()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return Params(ref)
}

// Stepper is a sharded wrapper's model (zero's, fsdp's) as ClipStep
// drives it.
type Stepper interface {
	ClipGradNorm(ctx context.Context, maxNorm, normType float64) (float64, error)
	Step(ctx context.Context) error
	ZeroGrad()
}

// ClipStep ends a step of m: it clips the gradient to a 2-norm of maxNorm,
// steps the optimizer and zeroes the gradient.
func ClipStep(ctx context.Context, m Stepper, maxNorm float64) error {
	if _, err := m.ClipGradNorm(ctx, maxNorm, 2); err != nil {
		return err
	}
	if err := m.Step(ctx); err != nil {
		return err
	}
	m.ZeroGrad()
	return nil
}
