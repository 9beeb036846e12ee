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

func (m dpModel) Step(ctx context.Context) error {
	if err := m.Model.Step(ctx); err != nil {
		return err
	}
	m.ZeroGrad()
	return nil
}

func (m dpModel) FullState(context.Context) (map[string]*tensor.Tensor, error) {
	return m.FullStateDict(), nil
}

func (m dpModel) LoadFull(_ context.Context, sd map[string]*tensor.Tensor) error {
	return m.LoadShardedStateDict(FullEntries(sd))
}

func conformance(stage Stage) dptest.Wrapper {
	return dptest.Wrapper{Name: stage.String(),
		Wrap: func(ctx context.Context, mod nn.Module, _ []nn.Module, pg distributed.ProcessGroup, o dptest.Options) (dptest.Model, error) {
			m, err := Wrap(ctx, mod, pg, Options{Stage: stage, FindUnusedParameters: o.FindUnusedParameters,
				Optimizer: func(shard []nn.NamedParameter) (optim.Optimizer, error) { return o.Optimizer(Vars(shard)) }})
			if err != nil {
				return nil, err
			}
			return dpModel{m}, nil
		}}
}

func TestConformance(t *testing.T) {
	t.Run("zero1", func(t *testing.T) { dptest.Run(t, conformance(Stage1)) })
	t.Run("zero2", func(t *testing.T) { dptest.Run(t, conformance(Stage2)) })
}
