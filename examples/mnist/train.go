package main

import (
	"context"
	"fmt"
	"iter"
	"slices"
	"time"

	"github.com/cohortml/cohort/datasets"
	"github.com/cohortml/cohort/ddp"
	"github.com/cohortml/cohort/nn"
	"github.com/cohortml/cohort/obs"
	"github.com/cohortml/cohort/obs/trace"
	"github.com/cohortml/cohort/optim"
	"github.com/cohortml/cohort/recipe"
	"github.com/cohortml/cohort/tensor"
)

// watch is where trainEpoch reports its steps: the run being observed
// (progress bar, run page, trace; nil: nowhere) and where the epoch sits in
// the job.
type watch struct {
	run   *obs.Run
	epoch int            // 0-based
	step  int            // steps done before this epoch
	seen  func(obs.Step) // tests: called with each step's report too
}

// trainEpoch runs one synchronised SGD step per batch of order and returns
// this rank's mean loss. afterStep, when not nil, runs after every step
// with the batch's sample indices (checkpoints); its error ends the epoch.
//
// Each step is traced (when w.run traces) as spans on obs/trace's tracks:
// "batch" on data, the recipe's "forward", "backward" and "optimizer" on
// compute, and, from ddp's Options.Span, each bucket's all-reduce on comm.
// It is then reported to w.run with its time split into data wait, exposed
// communication (ddp.Stats.Exposed, what the all-reduce added to the step)
// and compute (the rest).
func trainEpoch(ctx context.Context, m *ddp.Model, opt optim.Optimizer, sched *optim.Scheduler, ds *datasets.MNIST, order []int, batch int, shape []int, w watch, afterStep func(idx []int) error) (float64, error) {
	loader, err := recipe.MNISTLoader(ds, order, batch)
	if err != nil {
		return 0, err
	}
	next, stop := iter.Pull2(loader.Batches(ctx))
	defer stop()
	tr, dev := w.run.Tracer(), recipe.DeviceOf(m)
	var sum float64
	steps := 0
	for range (len(order) + batch - 1) / batch {
		t0 := time.Now()
		stepSpan := tr.Begin(trace.Step, "step")
		sp := tr.Begin(trace.Data, "batch")
		b, err, ok := next()
		sp.End()
		if !ok {
			return 0, fmt.Errorf("loader ended after %d of %d samples", steps*batch, len(order))
		}
		if err != nil {
			return 0, err
		}
		dataWait := time.Since(t0)
		before := m.Stats()
		loss, err := recipe.ClassifierStep(ctx, m, opt, sched, recipe.Input(b, shape, dev), b.Labels, tr)
		if err != nil {
			return 0, err
		}
		l := float64(loss.Value.To(tensor.CPU).Item())
		sum += l
		stepSpan.End()

		d, after := time.Since(t0), m.Stats()
		exposed := after.Exposed - before.Exposed
		rep := obs.Step{Step: w.step + steps, Epoch: w.epoch + 1, Loss: l, Samples: b.Size(),
			Duration: d, DataWait: dataWait, Comm: exposed, Compute: d - dataWait - exposed, Bytes: after.Bytes - before.Bytes}
		w.run.Step(rep)
		if w.seen != nil {
			w.seen(rep)
		}
		steps++
		if afterStep != nil {
			if err := afterStep(slices.Clone(b.Indices)); err != nil {
				return 0, err
			}
		}
	}
	return sum / float64(max(steps, 1)), nil
}

// evaluate returns the fraction of ds the model classifies correctly.
func evaluate(model nn.Layer, ds *datasets.MNIST, shape []int) (float64, error) {
	return recipe.Accuracy(model, ds, shape)
}

// subset returns the first n samples of ds (sharing its storage).
func subset(ds *datasets.MNIST, n int) *datasets.MNIST {
	px := ds.Rows * ds.Cols
	return &datasets.MNIST{Images: ds.Images[:n*px], Labels: ds.Labels[:n], Rows: ds.Rows, Cols: ds.Cols}
}
