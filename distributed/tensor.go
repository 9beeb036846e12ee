package distributed

import (
	"context"
	"fmt"

	"github.com/cohortml/cohort/tensor"
)

// Collectives on tensors, wherever they live. A tensor in host memory is
// a Buffer like any other (FromTensor); a tensor on an accelerator is
// handed to the backend as it is, through these optional methods of its
// groups:
//
//	AllReduceTensor(ctx context.Context, t *tensor.Tensor, op ReduceOp) Work
//	BroadcastTensor(ctx context.Context, t *tensor.Tensor, root int) Work
//
// which a backend that runs on device memory (NCCL) implements: the data
// never crosses to the host. A backend without them (native, mpi) is given
// only host memory: a device tensor is refused with an error naming the
// device and the backend, as PyTorch's gloo refuses CUDA tensors for most
// ops. It is refused rather than copied to the host and back because the
// copy would be silent: a GPU job on the wrong backend would train at
// PCIe speed with nothing to say why, where the error names the remedy
// (the nccl backend, which Init picks for a CUDA device, or CPU tensors).
//
// A backend's groups may also implement BackendName() string, the name it
// is registered under, for such errors.

type tensorCollectives interface {
	AllReduceTensor(ctx context.Context, t *tensor.Tensor, op ReduceOp) Work
	BroadcastTensor(ctx context.Context, t *tensor.Tensor, root int) Work
}

// AllReduceTensor reduces t element-wise across the ranks of pg, in place.
// t must be contiguous. On the CPU it is pg.AllReduce of its elements; on
// a device it needs a backend that takes device tensors (see above), and
// otherwise returns a failed Work. t must not be touched (on its device
// too) until the Work is done.
func AllReduceTensor(ctx context.Context, pg ProcessGroup, t *tensor.Tensor, op ReduceOp) Work {
	return onTensor("allreduce", pg, t,
		func(b Buffer) Work { return pg.AllReduce(ctx, b, op) },
		func(d tensorCollectives) Work { return d.AllReduceTensor(ctx, t, op) })
}

// BroadcastTensor copies root's t into every rank's t, as AllReduceTensor
// reduces.
func BroadcastTensor(ctx context.Context, pg ProcessGroup, t *tensor.Tensor, root int) Work {
	return onTensor("broadcast", pg, t,
		func(b Buffer) Work { return pg.Broadcast(ctx, b, root) },
		func(d tensorCollectives) Work { return d.BroadcastTensor(ctx, t, root) })
}

// onTensor runs collective op on t: host on t's elements when t is in
// host memory, else device through pg's tensor methods once deviceTensor
// has accepted t (a failed Work when it does not).
func onTensor(op string, pg ProcessGroup, t *tensor.Tensor, host func(Buffer) Work, device func(tensorCollectives) Work) Work {
	if t.Device().IsCPU() {
		return host(FromTensor(t))
	}
	if err := deviceTensor(op, pg, t); err != nil {
		return DoneWork(err)
	}
	return device(pg.(tensorCollectives))
}

// TakesDeviceTensors reports whether pg's backend runs collectives on
// device tensors (AllReduceTensor and BroadcastTensor of a tensor on an
// accelerator).
func TakesDeviceTensors(pg ProcessGroup) bool {
	_, ok := pg.(tensorCollectives)
	return ok
}

// BackendName returns the name pg's backend is registered under, or its
// Go type when the group does not say.
func BackendName(pg ProcessGroup) string {
	if n, ok := pg.(interface{ BackendName() string }); ok {
		return n.BackendName()
	}
	return fmt.Sprintf("%T", pg)
}

func deviceTensor(op string, pg ProcessGroup, t *tensor.Tensor) error {
	if !t.IsContiguous() {
		return fmt.Errorf("distributed: %s of a tensor on %v: the tensor is not contiguous", op, t.Device())
	}
	if !TakesDeviceTensors(pg) {
		return fmt.Errorf("distributed: %s of a tensor on %v: backend %q takes host memory only (for CUDA tensors use the nccl backend, which Init picks for a CUDA device, or COHORT_BACKEND=nccl; or move the tensor to the CPU)",
			op, t.Device(), BackendName(pg))
	}
	return nil
}

// DoneWork returns a Work that is already done, with err as its error
// (nil: it succeeded): for ops refused before they start, or finished
// synchronously.
func DoneWork(err error) Work {
	c := make(chan struct{})
	close(c)
	return doneWork{err, c}
}

type doneWork struct {
	err  error
	done chan struct{}
}

func (w doneWork) Wait() error           { return w.err }
func (w doneWork) Done() <-chan struct{} { return w.done }
