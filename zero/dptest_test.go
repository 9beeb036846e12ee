package zero

import (
	"context"
	"testing"

	"github.com/cohortml/cohort/autograd"
	"github.com/cohortml/cohort/distributed"
	"github.com/cohortml/cohort/internal/dp/dptest"
	"github.com/cohortml/cohort/nn"
	"github.com/cohortml/cohort/optim"
	"github.com/cohortml/cohort/tensor"
)

// dpModel adapts a zero Model to the conformance suite.
type dpModel struct{ *Model }

func (m dpModel) Call(ctx context.Context, f dptest.Forward) (*autograd.Var, error) {
	return m.Model.Call(ctx, func() *autograd.Var {
		return f(func(_ int, x *autograd.Var, g func(*autograd.Var) *autograd.Var) *autograd.Var { return g(x) })
	})
}

func (m dpModel) ClipGradNorm(ctx context.Context, maxNorm float64) (float64, error) {
	return m.Model.ClipGradNorm(ctx, maxNorm, 2)
}

func (m dpModel) Step(ctx context.Context) error { return dptest.StepZero(ctx, m.Model) }

func (m dpModel) FullState(context.Context) (map[string]*tensor.Tensor, error) {
	return m.FullStateDict(), nil
}

func (m dpModel) LoadFull(_ context.Context, sd map[string]*tensor.Tensor) error {
	return m.LoadShardedStateDict(FullEntries(sd))
}

func conformance(name string, zo Options) dptest.Wrapper {
	return dptest.Wrapper{Name: name,
		Wrap: func(ctx context.Context, mod nn.Module, _ []nn.Module, pg distributed.ProcessGroup, o dptest.Options) (dptest.Model, error) {
			zo := zo // each rank its own copy: the ranks wrap at once
			zo.FindUnusedParameters = o.FindUnusedParameters
			zo.Optimizer = func(shard []nn.NamedParameter) (optim.Optimizer, error) { return o.Optimizer(Vars(shard)) }
			m, err := Wrap(ctx, mod, pg, zo)
			if err != nil {
				return nil, err
			}
			return dpModel{m}, nil
		}}
}

// TestConformance runs the data-parallel suite on both stages, and on
// Stage2 with its buffers freed after every step.
func TestConformance(t *testing.T) {
	for _, c := range []struct {
		name string
		o    Options
	}{
		{"zero1", Options{Stage: Stage1}},
		{"zero2", Options{Stage: Stage2}},
		{"zero2-free-buffers", Options{Stage: Stage2, FreeBuffers: true}},
	} {
		t.Run(c.name, func(t *testing.T) { dptest.Run(t, conformance(c.name, c.o)) })
	}
}
