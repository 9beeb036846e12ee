package fsdp

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

// dpModel adapts an fsdp Model to the conformance suite. fsdp has no
// Join (a joined rank would have to gather every unit the others run).
type dpModel struct{ *Model }

func (m dpModel) Call(ctx context.Context, f dptest.Forward) (*autograd.Var, error) {
	return m.Model.Call(ctx, func(us *Units) *autograd.Var { return f(us.Run) })
}

func (m dpModel) ClipGradNorm(ctx context.Context, maxNorm float64) (float64, error) {
	return m.Model.ClipGradNorm(ctx, maxNorm, 2)
}

func (m dpModel) Step(ctx context.Context) error { return dptest.StepZero(ctx, m.Model) }

func (m dpModel) FullState(ctx context.Context) (map[string]*tensor.Tensor, error) {
	return m.FullStateDict(ctx)
}

func (m dpModel) LoadFull(_ context.Context, sd map[string]*tensor.Tensor) error {
	return m.LoadShardedStateDict(FullEntries(sd))
}

// TestConformance runs the data-parallel suite on fsdp, and with its
// buffers freed after every step, and with parameters kept gathered from
// forward to backward.
func TestConformance(t *testing.T) {
	for _, c := range []struct {
		name string
		o    Options
	}{
		{"fsdp", Options{}},
		{"fsdp-free-buffers", Options{FreeBuffers: true}},
		{"fsdp-keep-after-forward", Options{KeepAfterForward: true}},
	} {
		t.Run(c.name, func(t *testing.T) { dptest.Run(t, conformance(c.name, c.o)) })
	}
}

func conformance(name string, fo Options) dptest.Wrapper {
	return dptest.Wrapper{Name: name,
		Wrap: func(ctx context.Context, mod nn.Module, units []nn.Module, pg distributed.ProcessGroup, o dptest.Options) (dptest.Model, error) {
			fo := fo // each rank its own copy: the ranks wrap at once
			fo.FindUnusedParameters = o.FindUnusedParameters
			fo.Optimizer = func(shard []nn.NamedParameter) (optim.Optimizer, error) {
				vars := make([]*autograd.Var, len(shard))
				for i, s := range shard {
					vars[i] = s.Param
				}
				return o.Optimizer(vars)
			}
			m, err := Wrap(ctx, mod, units, pg, fo)
			if err != nil {
				return nil, err
			}
			return dpModel{m}, nil
		}}
}
