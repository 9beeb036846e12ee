package main

import (
	"context"
	"time"

	"github.com/cohortml/cohort/autograd"
	"github.com/cohortml/cohort/datasets"
	"github.com/cohortml/cohort/ddp"
	"github.com/cohortml/cohort/nn"
	"github.com/cohortml/cohort/obs"
	"github.com/cohortml/cohort/obs/trace"
	"github.com/cohortml/cohort/optim"
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
// "batch" on data, "forward", "backward" and "optimizer" on compute, and,
// from ddp's Options.Span, each bucket's all-reduce on comm. It is then
// reported to w.run with its time split into data wait, exposed
// communication (ddp.Stats.Exposed, what the all-reduce added to the step)
// and compute (the rest).
func trainEpoch(ctx context.Context, m *ddp.Model, opt optim.Optimizer, sched *optim.Scheduler, ds *datasets.MNIST, order []int, batch int, shape []int, w watch, afterStep func(idx []int) error) (float64, error) {
	tr := w.run.Tracer()
	b := batchBuf{dev: deviceOf(m)}
	var sum float64
	steps := 0
	for lo := 0; lo < len(order); lo += batch {
		t0 := time.Now()
		stepSpan := tr.Begin(trace.Step, "step")
		idx := order[lo:min(lo+batch, len(order))]
		sp := tr.Begin(trace.Data, "batch")
		x, y := b.fill(ds, idx, shape)
		sp.End()
		dataWait := time.Since(t0)
		before := m.Stats()

		sp = tr.Begin(trace.Compute, "forward")
		out, err := m.Forward(ctx, x)
		if err != nil {
			return 0, err
		}
		loss := nn.CrossEntropy(out, y)
		sp.End()
		sp = tr.Begin(trace.Compute, "backward")
		if err := m.Backward(ctx, loss); err != nil { // gradients are now the average over the ranks
			return 0, err
		}
		sp.End()
		sp = tr.Begin(trace.Compute, "optimizer")
		opt.Step()
		opt.ZeroGrad()
		sched.Step()
		sp.End()
		l := float64(loss.Value.To(tensor.CPU).Item())
		sum += l
		stepSpan.End()

		d, after := time.Since(t0), m.Stats()
		exposed := after.Exposed - before.Exposed
		rep := obs.Step{Step: w.step + steps, Epoch: w.epoch + 1, Loss: l, Samples: len(idx),
			Duration: d, DataWait: dataWait, Comm: exposed, Compute: d - dataWait - exposed, Bytes: after.Bytes - before.Bytes}
		w.run.Step(rep)
		if w.seen != nil {
			w.seen(rep)
		}
		steps++
		if afterStep != nil {
			if err := afterStep(idx); err != nil {
				return 0, err
			}
		}
	}
	return sum / float64(max(steps, 1)), nil
}

// evaluate returns the fraction of ds the model classifies correctly.
func evaluate(model nn.Layer, ds *datasets.MNIST, shape []int) float64 {
	defer nn.NoGrad(model)()
	model.SetTraining(false)
	defer model.SetTraining(true)
	b := batchBuf{dev: deviceOf(model)}
	idx := make([]int, ds.Len())
	for i := range idx {
		idx[i] = i
	}
	correct := 0
	for lo := 0; lo < len(idx); lo += 1000 {
		x, y := b.fill(ds, idx[lo:min(lo+1000, len(idx))], shape)
		for i, p := range tensor.ArgMax(model.Forward(x).Value.To(tensor.CPU)) {
			if int64(p) == y[i] {
				correct++
			}
		}
	}
	return float64(correct) / float64(ds.Len())
}

// subset returns the first n samples of ds (sharing its storage).
func subset(ds *datasets.MNIST, n int) *datasets.MNIST {
	px := ds.Rows * ds.Cols
	return &datasets.MNIST{Images: ds.Images[:n*px], Labels: ds.Labels[:n], Rows: ds.Rows, Cols: ds.Cols}
}

// The training set's pixel mean and standard deviation: inputs are
// standardised with them, as in PyTorch's MNIST example.
const pixelMean, pixelStd = 0.1307, 0.3081

// batchBuf gathers standardised samples into buffers reused from batch to
// batch.
type batchBuf struct {
	x   []float32
	y   []int64
	dev tensor.Device // where the batch goes
}

func (b *batchBuf) fill(ds *datasets.MNIST, idx []int, shape []int) (*autograd.Var, []int64) {
	n := ds.Rows * ds.Cols
	b.x, b.y = b.x[:0], b.y[:0]
	for _, i := range idx {
		for _, v := range ds.Images[i*n : (i+1)*n] {
			b.x = append(b.x, (v-pixelMean)/pixelStd)
		}
		b.y = append(b.y, ds.Labels[i])
	}
	return autograd.NewVar(tensor.FromSlice(b.x, append([]int{len(idx)}, shape...)...).To(b.dev), false), b.y
}
