package ddp

import (
	"context"
	"testing"

	"github.com/cohortml/cohort/autograd"
	"github.com/cohortml/cohort/distributed"
	"github.com/cohortml/cohort/distributed/distributedtest"
	"github.com/cohortml/cohort/internal/dp/dptest"
	"github.com/cohortml/cohort/internal/fakebackend"
	"github.com/cohortml/cohort/nn"
	"github.com/cohortml/cohort/optim"
	"github.com/cohortml/cohort/tensor"
)

// dpModel adapts a ddp Model and the optimizer over its full parameters
// to the conformance suite.
type dpModel struct {
	*Model
	mod nn.Module
	opt optim.Optimizer
}

func (m dpModel) Call(ctx context.Context, f dptest.Forward) (*autograd.Var, error) {
	return m.Model.Call(ctx, func() *autograd.Var {
		return f(func(_ int, x *autograd.Var, g func(*autograd.Var) *autograd.Var) *autograd.Var { return g(x) })
	})
}

func (m dpModel) ClipGradNorm(_ context.Context, maxNorm float64) (float64, error) {
	return optim.ClipGradNorm(nn.Parameters(m.mod), maxNorm, 2)
}

func (m dpModel) Step(context.Context) error {
	m.opt.Step()
	m.opt.ZeroGrad()
	return nil
}

func (m dpModel) FullState(context.Context) (map[string]*tensor.Tensor, error) {
	return nn.StateDict(m.mod), nil
}

func (m dpModel) LoadFull(_ context.Context, sd map[string]*tensor.Tensor) error {
	return nn.LoadStateDict(m.mod, sd)
}

func TestConformance(t *testing.T) {
	dptest.Run(t, dptest.Wrapper{Name: "ddp", Wrap: wrapForSuite})
}

// TestConformanceOnDevice runs the suite with every rank's model on a fake
// device (internal/fakebackend) and a group that takes device tensors
// (distributedtest.DeviceGroup, as the nccl backend's groups do): the
// buckets live on the device and the results equal one CPU process's.
func TestConformanceOnDevice(t *testing.T) {
	dptest.Run(t, dptest.Wrapper{Name: "ddp on a fake device", Wrap: wrapForSuite,
		Device: fakebackend.Device(0),
		Group:  func(pg distributed.ProcessGroup) distributed.ProcessGroup { return distributedtest.DeviceGroup(pg) }})
}

func wrapForSuite(ctx context.Context, mod nn.Module, _ []nn.Module, pg distributed.ProcessGroup, o dptest.Options) (dptest.Model, error) {
	{
		m, err := WrapModule(ctx, mod, pg, Options{FindUnusedParameters: o.FindUnusedParameters, GradientAsBucketView: true})
		if err != nil {
			return nil, err
		}
		opt, err := o.Optimizer(nn.Parameters(mod))
		if err != nil {
			m.Close()
			return nil, err
		}
		return dpModel{m, mod, opt}, nil
	}
}
