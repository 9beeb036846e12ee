package optim

import (
	"fmt"

	"github.com/cohortml/cohort/tensor"
)

// DeviceKernels runs the optimizers' elementwise work on the tensors of an
// accelerator. The tensor.Backend of a device kind implements it as well
// when parameters may live on its devices; optimizers find it by a type
// assertion on tensor.BackendOf. Every tensor passed is on one device,
// contiguous, and of one length; each method computes exactly what the
// host function named in its comment computes.
type DeviceKernels interface {
	// AdamUpdate is AdamUpdate; maxExpAvgSq is nil without AMSGrad.
	AdamUpdate(param, grad, expAvg, expAvgSq, maxExpAvgSq *tensor.Tensor, h AdamHyper, step int64)
	// SGDUpdate is SGDUpdate; buf is nil without momentum.
	SGDUpdate(param, grad, buf *tensor.Tensor, h SGDHyper, step int64)
	// GradNorm is NormPart of g's elements.
	GradNorm(g *tensor.Tensor, normType float64) float64
}

// NormPart returns what g adds to ClipGradNorm's accumulator: Σ |g|^p in
// float64 for a finite normType p, max |g| for +Inf. Accumulating parts
// (acc + part, or max for +Inf) gives the same bits as ClipGradNorm's pass
// over each gradient.
func NormPart(g []float32, normType float64) float64 { return accumulateNorm(0, g, normType) }

// deviceKernels returns the kernels for t's device, nil for the CPU; it
// panics, naming op and the device, when the device's backend has none.
func deviceKernels(op string, t *tensor.Tensor) DeviceKernels {
	dev := t.Device()
	if dev.IsCPU() {
		return nil
	}
	b, _ := tensor.BackendOf(dev)
	k, ok := b.(DeviceKernels)
	if !ok {
		panic(fmt.Sprintf("optim: %s: the backend of %v has no optimizer kernels", op, dev))
	}
	return k
}

// sameDevice panics unless every tensor is on dev, naming op, the
// parameter and both devices.
func sameDevice(op string, i int, dev tensor.Device, ts ...*tensor.Tensor) {
	for _, t := range ts {
		if t != nil && t.Device() != dev {
			panic(fmt.Sprintf("optim: %s: parameter %d: operands on %v and %v (optimizer state on %v: move the model before building its optimizer)", op, i, dev, t.Device(), dev))
		}
	}
}

// deviceAdamState is Adam's state of a parameter on a device.
type deviceAdamState struct {
	expAvg, expAvgSq, maxExpAvgSq *tensor.Tensor
}
