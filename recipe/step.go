package recipe

import (
	"context"

	"github.com/cohortml/cohort/autograd"
	"github.com/cohortml/cohort/nn"
	"github.com/cohortml/cohort/obs/trace"
	"github.com/cohortml/cohort/optim"
)

// Runner runs a step's forward and backward passes: the model alone
// (Local), or a data-parallel wrapper whose Backward also averages the
// gradients over the ranks (ddp.Model).
type Runner interface {
	Forward(ctx context.Context, x *autograd.Var) (*autograd.Var, error)
	Backward(ctx context.Context, loss *autograd.Var) error
}

// Local is a Runner for a model trained by one process.
func Local(m nn.Layer) Runner { return local{m} }

type local struct{ m nn.Layer }

func (l local) Forward(_ context.Context, x *autograd.Var) (*autograd.Var, error) {
	return l.m.Forward(x), nil
}

func (l local) Backward(_ context.Context, loss *autograd.Var) error {
	autograd.Backward(loss)
	return nil
}

// ClassifierStep is one training step of a classifier: forward, mean
// cross-entropy against labels y, backward, the optimizer's update, and
// the gradients zeroed for the next step, then the learning-rate
// schedule's step (sched may be nil). It returns the loss. The phases are
// spans "forward", "backward" and "optimizer" on tr's compute track (tr
// may be nil).
func ClassifierStep(ctx context.Context, r Runner, opt optim.Optimizer, sched *optim.Scheduler, x *autograd.Var, y []int64, tr *trace.Tracer) (*autograd.Var, error) {
	sp := tr.Begin(trace.Compute, "forward")
	out, err := r.Forward(ctx, x)
	if err != nil {
		return nil, err
	}
	loss := nn.CrossEntropy(out, y)
	sp.End()
	sp = tr.Begin(trace.Compute, "backward")
	err = r.Backward(ctx, loss)
	sp.End()
	if err != nil {
		return nil, err
	}
	sp = tr.Begin(trace.Compute, "optimizer")
	opt.Step()
	opt.ZeroGrad()
	if sched != nil {
		sched.Step()
	}
	sp.End()
	return loss, nil
}
