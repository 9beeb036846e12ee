package distributedtest

import (
	"context"
	"fmt"

	"github.com/cohortml/cohort/distributed"
	"github.com/cohortml/cohort/tensor"
)

// DeviceGroup wraps pg as a group of a backend that takes device tensors
// (distributed.AllReduceTensor and BroadcastTensor of a tensor on an
// accelerator), as the nccl backend's groups do: a fake for tests of the
// wrappers above it (ddp with its buckets on a fake device) on machines
// without GPUs. It runs each such op through pg on a host copy (the
// tensor backend's Download, pg's op, Upload), so its results are pg's
// bit for bit; Tensors counts the tensors it moved. Every other op is
// pg's (pg's optional methods, NewGroup and the like, are not forwarded).
// The host copy is the fake's, not the contract: a real device backend
// moves nothing through the host.
func DeviceGroup(pg distributed.ProcessGroup) *FakeDeviceGroup {
	return &FakeDeviceGroup{ProcessGroup: pg}
}

// FakeDeviceGroup is DeviceGroup's group. Use it from one goroutine (a
// rank's), as ranks use their groups.
type FakeDeviceGroup struct {
	distributed.ProcessGroup
	// Tensors counts the device tensors reduced or broadcast.
	Tensors int
}

// BackendName implements the optional method distributed.BackendName calls.
func (g *FakeDeviceGroup) BackendName() string {
	return "fake-device(" + distributed.BackendName(g.ProcessGroup) + ")"
}

// AllReduceTensor implements distributed's optional method.
func (g *FakeDeviceGroup) AllReduceTensor(ctx context.Context, t *tensor.Tensor, op distributed.ReduceOp) distributed.Work {
	return g.staged(t, func(b distributed.Buffer) distributed.Work { return g.ProcessGroup.AllReduce(ctx, b, op) })
}

// BroadcastTensor implements distributed's optional method.
func (g *FakeDeviceGroup) BroadcastTensor(ctx context.Context, t *tensor.Tensor, root int) distributed.Work {
	return g.staged(t, func(b distributed.Buffer) distributed.Work { return g.ProcessGroup.Broadcast(ctx, b, root) })
}

// staged runs op on a host copy of t and writes the result back before
// the returned Work is done (synchronously: the fake has no stream).
func (g *FakeDeviceGroup) staged(t *tensor.Tensor, op func(distributed.Buffer) distributed.Work) distributed.Work {
	be, ok := tensor.BackendOf(t.Device())
	if !ok || be == nil {
		return distributed.DoneWork(fmt.Errorf("distributedtest: fake device group: no tensor backend for %v", t.Device()))
	}
	if !t.IsContiguous() {
		return distributed.DoneWork(fmt.Errorf("distributedtest: fake device group: tensor on %v is not contiguous", t.Device()))
	}
	g.Tensors++
	host := make([]float32, t.Len())
	be.Download(host, t.Buffer(), t.Offset())
	if err := op(distributed.F32(host)).Wait(); err != nil {
		return distributed.DoneWork(err)
	}
	be.Upload(t.Buffer(), t.Offset(), host)
	return distributed.DoneWork(nil)
}
