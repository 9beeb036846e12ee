package main

import (
	"context"
	"fmt"
	"iter"
	"slices"

	"github.com/cohortml/cohort/datasets"
	"github.com/cohortml/cohort/ddp"
	"github.com/cohortml/cohort/obs"
	"github.com/cohortml/cohort/optim"
	"github.com/cohortml/cohort/recipe"
	"github.com/cohortml/cohort/tensor"
)

// watch is where trainEpoch reports its steps: the run being observed
// (nil: nowhere), the epoch (0-based), the steps done before it, and seen.
type watch struct {
	run         *obs.Run
	epoch, step int
	seen        func(obs.Step)
}

// trainEpoch runs one synchronised SGD step per batch of order and returns
// this rank's mean loss; afterStep, when not nil, runs after every step
// with the batch's samples, and its error ends the epoch. Each step is
// traced and reported (obs.StepTimer) with the all-reduce time it exposed.
func trainEpoch(ctx context.Context, m *ddp.Model, opt optim.Optimizer, sched *optim.Scheduler, ds *datasets.MNIST, order []int, batch int, shape []int, w watch, afterStep func(idx []int) error) (float64, error) {
	loader, err := recipe.MNISTLoader(ds, order, batch)
	if err != nil {
		return 0, err
	}
	next, stop := iter.Pull2(loader.Batches(ctx))
	defer stop()
	dev := recipe.DeviceOf(m)
	var sum float64
	steps := 0
	for range (len(order) + batch - 1) / batch {
		timer := w.run.StartStep()
		b, err, ok := next()
		timer.Loaded()
		if !ok {
			return 0, fmt.Errorf("loader ended after %d of %d samples", steps*batch, len(order))
		}
		if err != nil {
			return 0, err
		}
		before := m.Stats()
		loss, err := recipe.ClassifierStep(ctx, m, opt, sched, recipe.Input(b, shape, dev), b.Labels, w.run.Tracer())
		if err != nil {
			return 0, err
		}
		l := float64(loss.Value.To(tensor.CPU).Item())
		sum += l
		after := m.Stats()
		rep := timer.Done(obs.Step{Step: w.step + steps, Epoch: w.epoch + 1, Loss: l, Samples: b.Size(),
			Comm: after.Exposed - before.Exposed, Bytes: after.Bytes - before.Bytes})
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

// subset returns the first n samples of ds (sharing its storage).
func subset(ds *datasets.MNIST, n int) *datasets.MNIST {
	px := ds.Rows * ds.Cols
	return &datasets.MNIST{Images: ds.Images[:n*px], Labels: ds.Labels[:n], Rows: ds.Rows, Cols: ds.Cols}
}
