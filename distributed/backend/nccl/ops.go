package nccl

import (
	"cmp"
	"context"
	"fmt"

	"github.com/cohortml/cohort/device/nccl"
	"github.com/cohortml/cohort/distributed"
	"github.com/cohortml/cohort/distributed/collective"
	"github.com/cohortml/cohort/tensor"
)

// The ProcessGroup methods. Host buffers (distributed.Buffer) are staged
// through device memory on the communication stream: copied in, reduced
// by NCCL, copied out, one event after the lot. The ops NCCL lacks are
// built as PyTorch's ProcessGroupNCCL builds them: all-to-all, gather and
// scatter from sends and receives inside one NCCL group call, the
// barrier from a one-element all-reduce. Sends and receives follow NCCL:
// between two ranks they match in issue order (tags are recorded, not
// matched).

var _ distributed.ProcessGroup = (*group)(nil)

func ncclType(dt distributed.DType) (nccl.DataType, error) {
	switch dt {
	case distributed.Float32:
		return nccl.Float32, nil
	case distributed.Float64:
		return nccl.Float64, nil
	case distributed.Int64:
		return nccl.Int64, nil
	case distributed.BFloat16:
		return nccl.BFloat16, nil
	case distributed.Float16:
		return nccl.Float16, nil
	}
	return 0, fmt.Errorf("dtype %v has no NCCL type", dt)
}

// ncclOp maps a reduce op; an Int64 average is NCCL's sum divided on the
// host afterwards (truncating, as the other backends do).
func ncclOp(op distributed.ReduceOp, dt distributed.DType) (r nccl.RedOp, divide bool, err error) {
	switch op {
	case distributed.Sum:
		return nccl.Sum, false, nil
	case distributed.Prod:
		return nccl.Prod, false, nil
	case distributed.Max:
		return nccl.Max, false, nil
	case distributed.Min:
		return nccl.Min, false, nil
	case distributed.Avg:
		if dt == distributed.Int64 {
			return nccl.Sum, true, nil
		}
		return nccl.Avg, false, nil
	}
	return 0, false, fmt.Errorf("invalid reduce op %d", int(op))
}

// ifAny returns launch, or for an op of no elements (n 0) one that
// launches nothing.
func ifAny(n int, launch func(c Comm, in, out Ptr, s Stream) error) func(c Comm, in, out Ptr, s Stream) error {
	if n == 0 {
		return func(Comm, Ptr, Ptr, Stream) error { return nil }
	}
	return launch
}

func (g *group) checkRoot(root int) error {
	if root < 0 || root >= g.Size() {
		return fmt.Errorf("root %d out of range [0, %d)", root, g.Size())
	}
	return nil
}

// averager divides an Int64 result by the group size on the host.
func (g *group) averager(b distributed.Buffer) func() {
	n := int64(g.Size())
	return func() {
		for i, v := range b.Int64s() {
			b.Int64s()[i] = v / n
		}
	}
}

func (g *group) AllReduce(ctx context.Context, buf distributed.Buffer, red distributed.ReduceOp) distributed.Work {
	o := &op{kind: collective.AllReduce, peer: -1}
	dt, err := ncclType(buf.DType)
	rop, divide, err2 := ncclOp(red, buf.DType)
	if err == nil {
		err = err2
	}
	n := buf.Len()
	o.in, o.out, o.inPlace, o.bytes = buf.Bytes(), buf.Bytes(), true, int64(len(buf.Bytes()))
	o.launch = ifAny(n, func(c Comm, in, out Ptr, s Stream) error { return c.AllReduce(in, out, n, dt, rop, s) })
	if divide {
		o.post = g.averager(buf)
	}
	return g.submit(ctx, o, err)
}

// AllReduceDevice all-reduces count elements of device memory at p in
// place, on the communication stream after the compute stream: the data
// path of device tensors (a DDP bucket). The memory must stay allocated
// until the Work is done on the device (Work.Wait, or WaitStream on the
// stream that frees or reuses it).
func (g *group) AllReduceDevice(ctx context.Context, p Ptr, count int, dtype distributed.DType, red distributed.ReduceOp) distributed.Work {
	o := &op{kind: collective.AllReduce, peer: -1, dIn: p, dOut: p}
	dt, err := ncclType(dtype)
	rop, divide, err2 := ncclOp(red, dtype)
	if err == nil {
		err = err2
	}
	if err == nil && divide {
		err = fmt.Errorf("an Int64 average on device memory is not supported")
	}
	o.bytes = int64(count) * int64(dtype.Size())
	o.launch = func(c Comm, in, out Ptr, s Stream) error { return c.AllReduce(in, out, count, dt, rop, s) }
	return g.submit(ctx, o, err)
}

// deviceMemory is what a device tensor's buffer gives this backend: the
// device address of an element, and the stream its writes are queued on
// (0: none; device/cudatensor's buffers implement it).
type deviceMemory interface {
	DevicePtr(off int) uintptr
	ComputeStream() uintptr
}

// tensorPtr returns the device address of t's first element, refusing a
// tensor this group's device cannot reach, and orders the group's ops
// after the stream that writes t.
func (g *group) tensorPtr(op string, t *tensor.Tensor) (Ptr, error) {
	dev := t.Device()
	m, ok := t.Buffer().(deviceMemory)
	switch {
	case !ok:
		return 0, fmt.Errorf("nccl: %s of a tensor on %v: its memory has no device address (NCCL takes CUDA tensors)", op, dev)
	case dev.Index() != g.dev.Ordinal():
		return 0, fmt.Errorf("nccl: %s of a tensor on %v: this rank's group runs on GPU %d (move the tensor, or open device %d: cudatensor.Open follows LOCAL_RANK)", op, dev, g.dev.Ordinal(), g.dev.Ordinal())
	case !t.IsContiguous():
		return 0, fmt.Errorf("nccl: %s of a tensor on %v: not contiguous", op, dev)
	}
	if s := Stream(m.ComputeStream()); s != 0 {
		g.mu.Lock()
		if g.compute == 0 {
			g.compute = s
		}
		g.mu.Unlock()
	}
	return Ptr(m.DevicePtr(t.Offset())), nil
}

// AllReduceTensor implements distributed.AllReduceTensor for a tensor on
// this rank's GPU: AllReduceDevice on its memory, no host copy.
func (g *group) AllReduceTensor(ctx context.Context, t *tensor.Tensor, red distributed.ReduceOp) distributed.Work {
	p, err := g.tensorPtr("allreduce", t)
	if err != nil {
		return distributed.DoneWork(err)
	}
	return g.AllReduceDevice(ctx, p, t.Len(), distributed.Float32, red)
}

// BroadcastTensor implements distributed.BroadcastTensor for a tensor on
// this rank's GPU, in place on its memory.
func (g *group) BroadcastTensor(ctx context.Context, t *tensor.Tensor, root int) distributed.Work {
	p, err := g.tensorPtr("broadcast", t)
	if err != nil {
		return distributed.DoneWork(err)
	}
	o := &op{kind: collective.Broadcast, peer: root, dIn: p, dOut: p}
	err = g.checkRoot(root)
	dt, _ := ncclType(distributed.Float32)
	n := t.Len()
	o.bytes = 4 * int64(n)
	o.launch = ifAny(n, func(c Comm, in, out Ptr, s Stream) error { return c.Broadcast(in, out, n, dt, root, s) })
	return g.submit(ctx, o, err)
}

func (g *group) Broadcast(ctx context.Context, buf distributed.Buffer, root int) distributed.Work {
	o := &op{kind: collective.Broadcast, peer: root}
	dt, err := ncclType(buf.DType)
	if e := g.checkRoot(root); e != nil {
		err = e
	}
	n := buf.Len()
	o.in, o.out, o.inPlace, o.bytes = buf.Bytes(), buf.Bytes(), true, int64(len(buf.Bytes()))
	o.launch = ifAny(n, func(c Comm, in, out Ptr, s Stream) error { return c.Broadcast(in, out, n, dt, root, s) })
	return g.submit(ctx, o, err)
}

func (g *group) Reduce(ctx context.Context, buf distributed.Buffer, root int, red distributed.ReduceOp) distributed.Work {
	o := &op{kind: collective.Reduce, peer: root}
	dt, err := ncclType(buf.DType)
	rop, divide, err2 := ncclOp(red, buf.DType)
	if err == nil {
		err = err2
	}
	if e := g.checkRoot(root); e != nil {
		err = e
	}
	n := buf.Len()
	o.in, o.inPlace, o.bytes = buf.Bytes(), true, int64(len(buf.Bytes()))
	if g.rank == root {
		o.out = buf.Bytes()
		if divide {
			o.post = g.averager(buf)
		}
	}
	o.launch = ifAny(n, func(c Comm, in, out Ptr, s Stream) error { return c.Reduce(in, out, n, dt, rop, root, s) })
	return g.submit(ctx, o, err)
}

// sameType checks that out and in have one dtype.
func sameType(out, in distributed.Buffer) error {
	if out.DType != in.DType {
		return fmt.Errorf("output dtype %v, input dtype %v", out.DType, in.DType)
	}
	return nil
}

// checkParts checks that out and in have one dtype and that whole, one of
// them (named name in the error), holds part for every rank.
func (g *group) checkParts(out, in distributed.Buffer, name string, whole, part distributed.Buffer) error {
	if err := sameType(out, in); err != nil {
		return err
	}
	if whole.Len() != g.Size()*part.Len() {
		return fmt.Errorf("%s has %d elements, want %d·%d", name, whole.Len(), g.Size(), part.Len())
	}
	return nil
}

func (g *group) AllGather(ctx context.Context, out, in distributed.Buffer) distributed.Work {
	o := &op{kind: collective.AllGather, peer: -1}
	dt, err := ncclType(in.DType)
	if e := g.checkParts(out, in, "output", out, in); e != nil {
		err = e
	} else if _, e := distributed.AllGatherInPlace(out, in, g.rank); e != nil {
		err = e
	}
	n := in.Len()
	o.in, o.out, o.outBytes, o.bytes = in.Bytes(), out.Bytes(), int64(len(out.Bytes())), int64(len(in.Bytes()))
	o.launch = ifAny(n, func(c Comm, in, out Ptr, s Stream) error { return c.AllGather(in, out, n, dt, s) })
	return g.submit(ctx, o, err)
}

func (g *group) ReduceScatter(ctx context.Context, out, in distributed.Buffer, red distributed.ReduceOp) distributed.Work {
	o := &op{kind: collective.ReduceScatter, peer: -1}
	dt, err := ncclType(in.DType)
	rop, divide, err2 := ncclOp(red, in.DType)
	err = cmp.Or(err2, g.checkParts(out, in, "input", in, out), err)
	n := out.Len()
	o.in, o.out, o.outBytes, o.bytes = in.Bytes(), out.Bytes(), int64(len(out.Bytes())), int64(len(in.Bytes()))
	if divide {
		o.post = g.averager(out)
	}
	o.launch = ifAny(n, func(c Comm, in, out Ptr, s Stream) error { return c.ReduceScatter(in, out, n, dt, rop, s) })
	return g.submit(ctx, o, err)
}

// exchange launches sends of in's chunks to the ranks in to and receives
// into out's chunks from the ranks in from, as one NCCL group call.
func exchange(c Comm, in, out Ptr, chunkBytes int, dt nccl.DataType, to, from []int, s Stream) (err error) {
	if err := c.GroupStart(); err != nil {
		return err
	}
	defer func() {
		if e := c.GroupEnd(); err == nil {
			err = e
		}
	}()
	count := chunkBytes / dt.Size()
	for _, j := range to {
		if err := c.Send(in+Ptr(j*chunkBytes), count, dt, j, s); err != nil {
			return err
		}
	}
	for _, j := range from {
		if err := c.Recv(out+Ptr(j*chunkBytes), count, dt, j, s); err != nil {
			return err
		}
	}
	return nil
}

func (g *group) all() []int {
	r := make([]int, g.Size())
	for i := range r {
		r[i] = i
	}
	return r
}

func (g *group) AllToAll(ctx context.Context, out, in distributed.Buffer) distributed.Work {
	o := &op{kind: collective.AllToAll, peer: -1}
	dt, err := ncclType(in.DType)
	switch {
	case sameType(out, in) != nil:
		err = sameType(out, in)
	case in.Len() != out.Len() || in.Len()%g.Size() != 0:
		err = fmt.Errorf("input has %d elements and output %d, want equal lengths divisible by %d", in.Len(), out.Len(), g.Size())
	}
	chunk := len(in.Bytes()) / g.Size()
	all := g.all()
	o.in, o.out, o.outBytes, o.bytes = in.Bytes(), out.Bytes(), int64(len(out.Bytes())), int64(len(in.Bytes()))
	o.launch = ifAny(chunk, func(c Comm, in, out Ptr, s Stream) error { return exchange(c, in, out, chunk, dt, all, all, s) })
	return g.submit(ctx, o, err)
}

func (g *group) Gather(ctx context.Context, out, in distributed.Buffer, root int) distributed.Work {
	return g.rooted(ctx, collective.Gather, out, in, root)
}

func (g *group) Scatter(ctx context.Context, out, in distributed.Buffer, root int) distributed.Work {
	return g.rooted(ctx, collective.Scatter, out, in, root)
}

// rooted builds a gather (every rank's in to its place in the root's
// out) or a scatter (chunk j of the root's in to rank j's out), the one
// the mirror of the other: the root receives each rank's chunk or sends
// each its own, itself included (NCCL sends to self), and every rank
// sends or receives one chunk, all inside one NCCL group call.
func (g *group) rooted(ctx context.Context, kind collective.Kind, out, in distributed.Buffer, root int) distributed.Work {
	gather := kind == collective.Gather
	part, whole, wholeName := out, in, "input"
	if gather {
		part, whole, wholeName = in, out, "output"
	}
	o := &op{kind: kind, peer: root}
	dt, err := ncclType(part.DType)
	if e := g.checkRoot(root); e != nil {
		err = e
	} else if g.rank == root {
		if e := g.checkParts(out, in, wholeName, whole, part); e != nil {
			err = e
		}
	}
	chunk := len(part.Bytes())
	var peers []int // the root's: every rank
	o.bytes = int64(chunk)
	if gather {
		o.in = in.Bytes()
	} else {
		o.out, o.outBytes = out.Bytes(), int64(chunk)
	}
	if g.rank == root {
		peers = g.all()
		if gather {
			o.out, o.outBytes = out.Bytes(), int64(len(out.Bytes()))
		} else {
			o.in = in.Bytes()
		}
	}
	o.launch = ifAny(chunk, func(c Comm, in, out Ptr, s Stream) error {
		if err := c.GroupStart(); err != nil {
			return err
		}
		count := chunk / dt.Size()
		var err error
		if gather {
			err = c.Send(in, count, dt, root, s)
		}
		for _, j := range peers {
			if err != nil {
				break
			}
			if gather {
				err = c.Recv(out+Ptr(j*chunk), count, dt, j, s)
			} else {
				err = c.Send(in+Ptr(j*chunk), count, dt, j, s)
			}
		}
		if err == nil && !gather {
			err = c.Recv(out, count, dt, root, s)
		}
		if e := c.GroupEnd(); err == nil {
			err = e
		}
		return err
	})
	return g.submit(ctx, o, err)
}

func (g *group) checkPeer(p int) error {
	switch {
	case p < 0 || p >= g.Size():
		return fmt.Errorf("peer %d out of range [0, %d)", p, g.Size())
	case p == g.rank:
		return fmt.Errorf("peer %d is this rank", p)
	}
	return nil
}

func (g *group) Send(ctx context.Context, buf distributed.Buffer, to int, tag int) distributed.Work {
	o := &op{kind: collective.Send, peer: to, tag: tag}
	dt, err := ncclType(buf.DType)
	n := buf.Len()
	o.in, o.bytes = buf.Bytes(), int64(len(buf.Bytes()))
	o.launch = ifAny(n, func(c Comm, in, _ Ptr, s Stream) error { return c.Send(in, n, dt, to, s) })
	return g.submit(ctx, o, cmp.Or(g.checkPeer(to), err))
}

func (g *group) Recv(ctx context.Context, buf distributed.Buffer, from int, tag int) distributed.Work {
	o := &op{kind: collective.Recv, peer: from, tag: tag}
	dt, err := ncclType(buf.DType)
	n := buf.Len()
	o.out, o.outBytes, o.bytes = buf.Bytes(), int64(len(buf.Bytes())), int64(len(buf.Bytes()))
	o.launch = ifAny(n, func(c Comm, _, out Ptr, s Stream) error { return c.Recv(out, n, dt, from, s) })
	return g.submit(ctx, o, cmp.Or(g.checkPeer(from), err))
}

// Barrier all-reduces one element, as PyTorch's NCCL barrier does.
func (g *group) Barrier(ctx context.Context) distributed.Work {
	o := &op{kind: collective.Barrier, peer: -1, in: make([]byte, 4), inPlace: true}
	o.launch = func(c Comm, in, out Ptr, s Stream) error { return c.AllReduce(in, out, 1, nccl.Float32, nccl.Sum, s) }
	return g.submit(ctx, o, nil)
}
