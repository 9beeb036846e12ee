package nccl

import (
	"context"
	"fmt"
	"unsafe"

	"github.com/cohortml/cohort/device/cuda"
	"github.com/cohortml/cohort/device/nccl"
)

// cudaDevice is the real Device and Joiner: the CUDA driver's primary
// context of this rank's GPU, and NCCL's communicators on it. Every NCCL
// call runs with the context current (cuda.Context.Do).
type cudaDevice struct {
	lib *nccl.Lib
	ctx *cuda.Context
	ord int
	bus string
}

var (
	_ Device = (*cudaDevice)(nil)
	_ Joiner = (*cudaDevice)(nil)
)

// The driver's PCI attributes (CUdevice_attribute).
const (
	attrPCIBus    = 33
	attrPCIDevice = 34
	attrPCIDomain = 50
)

// openDevice opens this rank's GPU.
func openDevice(lib *nccl.Lib, getenv func(string) string) (*cudaDevice, error) {
	d, err := cuda.Load()
	if err != nil {
		return nil, err
	}
	if err := d.Init(); err != nil {
		return nil, err
	}
	n, err := d.DeviceCount()
	if err != nil {
		return nil, err
	}
	ord, err := cuda.LocalOrdinal(getenv, n) // LOCAL_RANK's, as cudatensor.Open's
	if err != nil {
		return nil, fmt.Errorf("nccl: %w (NCCL needs a GPU of its own for every rank)", err)
	}
	c, err := d.Primary(ord)
	if err != nil {
		return nil, err
	}
	var pci [3]int
	for i, a := range []int{attrPCIDomain, attrPCIBus, attrPCIDevice} {
		if pci[i], err = d.Attribute(ord, a); err != nil {
			c.Close()
			return nil, err
		}
	}
	return &cudaDevice{lib: lib, ctx: c, ord: ord, bus: fmt.Sprintf("%04x:%02x:%02x.0", pci[0], pci[1], pci[2])}, nil
}

func (d *cudaDevice) Close() error { return d.ctx.Close() }

func (d *cudaDevice) Ordinal() int  { return d.ord }
func (d *cudaDevice) BusID() string { return d.bus }

func (d *cudaDevice) Alloc(n int64) (Ptr, error) {
	p, err := d.ctx.MemAlloc(n)
	return Ptr(p), err
}
func (d *cudaDevice) Free(p Ptr) error { return d.ctx.MemFree(cuda.DevicePtr(p)) }
func (d *cudaDevice) CopyIn(dst Ptr, src []byte, s Stream) error {
	return d.ctx.CopyHtoDAsync(cuda.DevicePtr(dst), unsafe.Pointer(unsafe.SliceData(src)), int64(len(src)), cuda.Stream(s))
}
func (d *cudaDevice) CopyOut(dst []byte, src Ptr, s Stream) error {
	return d.ctx.CopyDtoHAsync(unsafe.Pointer(unsafe.SliceData(dst)), cuda.DevicePtr(src), int64(len(dst)), cuda.Stream(s))
}
func (d *cudaDevice) NewStream() (Stream, error) {
	s, err := d.ctx.NewStream(true)
	return Stream(s), err
}
func (d *cudaDevice) DestroyStream(s Stream) error { return d.ctx.DestroyStream(cuda.Stream(s)) }
func (d *cudaDevice) NewEvent() (Event, error) {
	e, err := d.ctx.NewEvent(false)
	return Event(e), err
}
func (d *cudaDevice) DestroyEvent(e Event) error { return d.ctx.DestroyEvent(cuda.Event(e)) }
func (d *cudaDevice) Record(e Event, s Stream) error {
	return d.ctx.Record(cuda.Event(e), cuda.Stream(s))
}
func (d *cudaDevice) StreamWaitEvent(s Stream, e Event) error {
	return d.ctx.StreamWaitEvent(cuda.Stream(s), cuda.Event(e))
}
func (d *cudaDevice) EventDone(e Event) (bool, error) { return d.ctx.EventDone(cuda.Event(e)) }

func (d *cudaDevice) NewID() (nccl.UniqueID, error) { return d.lib.GetUniqueID() }

// Join runs ncclCommInitRank, which blocks until every rank has joined
// and cannot be cancelled: when ctx ends first, Join returns and the call
// is left to finish (or not) in its goroutine; the process is expected to
// exit with Init's error. (A non-blocking init, ncclCommInitRankConfig
// with blocking=0 polled and aborted, would release it.)
func (d *cudaDevice) Join(ctx context.Context, id nccl.UniqueID, nranks, rank int) (Comm, error) {
	type result struct {
		c   nccl.Comm
		err error
	}
	done := make(chan result, 1)
	go func() {
		var r result
		if e := d.ctx.Do(func() { r.c, r.err = d.lib.CommInitRank(nranks, rank, id) }); e != nil {
			r.err = e
		}
		done <- r
	}()
	select {
	case r := <-done:
		if r.err != nil {
			return nil, r.err
		}
		return &cudaComm{d: d, c: r.c}, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("ncclCommInitRank: %d of %d ranks: %w", rank, nranks, ctx.Err())
	}
}

// cudaComm is a real communicator; each call runs with the context
// current.
type cudaComm struct {
	d *cudaDevice
	c nccl.Comm
}

func (c *cudaComm) do(f func() error) error {
	var err error
	if e := c.d.ctx.Do(func() { err = f() }); e != nil {
		return e
	}
	return err
}

func (c *cudaComm) AllReduce(send, recv Ptr, n int, dt nccl.DataType, op nccl.RedOp, s Stream) error {
	return c.do(func() error { return c.d.lib.AllReduce(send, recv, n, dt, op, c.c, s) })
}
func (c *cudaComm) Broadcast(send, recv Ptr, n int, dt nccl.DataType, root int, s Stream) error {
	return c.do(func() error { return c.d.lib.Broadcast(send, recv, n, dt, root, c.c, s) })
}
func (c *cudaComm) Reduce(send, recv Ptr, n int, dt nccl.DataType, op nccl.RedOp, root int, s Stream) error {
	return c.do(func() error { return c.d.lib.Reduce(send, recv, n, dt, op, root, c.c, s) })
}
func (c *cudaComm) AllGather(send, recv Ptr, n int, dt nccl.DataType, s Stream) error {
	return c.do(func() error { return c.d.lib.AllGather(send, recv, n, dt, c.c, s) })
}
func (c *cudaComm) ReduceScatter(send, recv Ptr, n int, dt nccl.DataType, op nccl.RedOp, s Stream) error {
	return c.do(func() error { return c.d.lib.ReduceScatter(send, recv, n, dt, op, c.c, s) })
}
func (c *cudaComm) Send(p Ptr, n int, dt nccl.DataType, peer int, s Stream) error {
	return c.do(func() error { return c.d.lib.Send(p, n, dt, peer, c.c, s) })
}
func (c *cudaComm) Recv(p Ptr, n int, dt nccl.DataType, peer int, s Stream) error {
	return c.do(func() error { return c.d.lib.Recv(p, n, dt, peer, c.c, s) })
}
func (c *cudaComm) GroupStart() error { return c.d.lib.GroupStart() }
func (c *cudaComm) GroupEnd() error   { return c.do(c.d.lib.GroupEnd) }
func (c *cudaComm) AsyncError() error { return c.d.lib.CommAsyncError(c.c) }
func (c *cudaComm) Abort() error      { return c.do(func() error { return c.d.lib.CommAbort(c.c) }) }
func (c *cudaComm) Destroy() error    { return c.do(func() error { return c.d.lib.CommDestroy(c.c) }) }
