package ddp

// Buckets on a device. When the model's parameters are on an accelerator
// (nn.To), the flat gradient buffer is allocated on that device, the
// gradients are views of it (as with Options.GradientAsBucketView), and
// each bucket is all-reduced as a device tensor through
// distributed.AllReduceTensor: no gradient crosses to the host. That
// needs a backend that takes device tensors (nccl); any other is refused
// at Wrap, naming the device and the backend.

import (
	"context"
	"fmt"

	"github.com/cohortml/cohort/distributed"
	"github.com/cohortml/cohort/nn"
	"github.com/cohortml/cohort/tensor"
)

// modelDevice returns the device every parameter and buffer is on, or an
// error naming two that differ.
func modelDevice(params []nn.NamedParameter, buffers []nn.NamedBuffer) (tensor.Device, error) {
	dev, first := tensor.CPU, ""
	check := func(name string, t *tensor.Tensor) error {
		if first == "" {
			dev, first = t.Device(), name
			return nil
		}
		if d := t.Device(); d != dev {
			return fmt.Errorf("ddp: Wrap: %q is on %v but %q on %v: move the whole model to one device (nn.To)", first, dev, name, d)
		}
		return nil
	}
	for _, np := range params {
		if err := check(np.Name, np.Param.Value); err != nil {
			return dev, err
		}
	}
	for _, nb := range buffers {
		if err := check(nb.Name, nb.Buffer); err != nil {
			return dev, err
		}
	}
	return dev, nil
}

// checkDevice refuses what device buckets do not support: a group whose
// backend takes host memory only, and hooks that compute on host buckets.
func (m *Model) checkDevice() error {
	if m.dev.IsCPU() {
		return nil
	}
	if m.world > 1 && !distributed.TakesDeviceTensors(m.pg) {
		return fmt.Errorf("ddp: Wrap: the model is on %v, but backend %q takes host memory only (use the nccl backend for CUDA: Init picks it for a CUDA device, or COHORT_BACKEND=nccl)", m.dev, distributed.BackendName(m.pg))
	}
	switch m.o.Hook.(type) {
	case AllReduceHook, *AllReduceHook:
	default:
		return fmt.Errorf("ddp: Wrap: Options.Hook %T works on host buckets; the model is on %v (only AllReduceHook runs on device buckets)", m.o.Hook, m.dev)
	}
	if m.o.VerifyEvery > 0 {
		return fmt.Errorf("ddp: Wrap: Options.VerifyEvery hashes host parameters; the model is on %v", m.dev)
	}
	return nil
}

// contiguousView returns the contiguous view of shape at element off of buf.
func contiguousView(buf tensor.Buffer, off int, shape []int) *tensor.Tensor {
	strides := make([]int, len(shape))
	s := 1
	for i := len(shape) - 1; i >= 0; i-- {
		strides[i] = s
		s *= shape[i]
	}
	return tensor.FromBuffer(buf, off, shape, strides)
}

// startAllReduceTensor is startAllReduce for a bucket on a device.
func startAllReduceTensor(ctx context.Context, pg distributed.ProcessGroup, index int, grad *tensor.Tensor, divisor int) Reduction {
	if pg.Size() == 1 && divisor == 1 {
		return newDoneReduction()
	}
	op, post := distributed.Sum, divisor
	if divisor == pg.Size() {
		op, post = distributed.Avg, 1
	}
	w := distributed.AllReduceTensor(ctx, pg, grad, op)
	return &workReduction{work: w, finish: func() error {
		if err := w.Wait(); err != nil {
			return fmt.Errorf("ddp: bucket %d: all-reduce of %d gradients on %v: %w", index, grad.Len(), grad.Device(), err)
		}
		if post != 1 {
			tensor.ScaleInto(grad, grad, 1/float32(post))
		}
		return nil
	}}
}

// takeDevice is Take on a device: parameter i's Grad is its view of the
// bucket, or (replaced or dropped by the caller) is carried into it.
func (m *Model) takeDevice(i int) error {
	p, v := m.params[i].Param, m.views[i]
	switch {
	case p.Grad == v:
		return nil
	case p.Grad == nil:
		v.Fill(0)
	case p.Grad.Len() != v.Len():
		return fmt.Errorf("ddp: parameter %q: gradient has shape %v, parameter %v", m.params[i].Name, p.Grad.Shape(), p.Value.Shape())
	default:
		v.CopyFrom(p.Grad.Reshape(v.Shape()...))
	}
	p.Grad = v
	return nil
}
