package nccl

import (
	"context"

	"github.com/cohortml/cohort/device/nccl"
)

// The seams between the group logic and the GPU: the group sees NCCL
// through Comm and Joiner, and the device (memory, streams, events)
// through Device. On a GPU they are NCCL and the CUDA driver (cuda.go);
// in tests a fake runs the collectives in host memory between goroutines
// (fake_test.go), so that the id exchange, the sequence numbers, the
// flight recorder, the timeouts and the aborts are tested without one.

// Ptr is a device address; Stream a device stream (nccl's handles).
type (
	Ptr    = nccl.Ptr
	Stream = nccl.Stream
)

// Event is a device event, recorded on a stream and waited for by the
// host (EventDone) or by another stream (StreamWaitEvent).
type Event uintptr

// Comm is one communicator: NCCL's calls on it, each enqueued on a
// stream. Enqueueing returns at once; the op is complete when its stream
// has run it. AsyncError and Abort may be called from any goroutine while
// another enqueues.
type Comm interface {
	AllReduce(send, recv Ptr, count int, dt nccl.DataType, op nccl.RedOp, s Stream) error
	Broadcast(send, recv Ptr, count int, dt nccl.DataType, root int, s Stream) error
	Reduce(send, recv Ptr, count int, dt nccl.DataType, op nccl.RedOp, root int, s Stream) error
	AllGather(send, recv Ptr, sendCount int, dt nccl.DataType, s Stream) error
	ReduceScatter(send, recv Ptr, recvCount int, dt nccl.DataType, op nccl.RedOp, s Stream) error
	Send(p Ptr, count int, dt nccl.DataType, peer int, s Stream) error
	Recv(p Ptr, count int, dt nccl.DataType, peer int, s Stream) error
	GroupStart() error
	GroupEnd() error
	// AsyncError is nil while the communicator is healthy.
	AsyncError() error
	// Abort stops the communicator's ops in flight and frees it: the
	// survivors of a failed peer unblock. Destroy frees an idle one.
	Abort() error
	Destroy() error
}

// Joiner makes communicators: NewID on one rank, Join on every rank of
// the communicator with the id it made. Join blocks until every rank has
// joined or ctx ends.
type Joiner interface {
	NewID() (nccl.UniqueID, error)
	Join(ctx context.Context, id nccl.UniqueID, nranks, rank int) (Comm, error)
}

// Device is the memory, streams and events of the GPU a group runs on.
// CopyIn and CopyOut are asynchronous on s: the host memory must stay
// untouched until the stream has run them.
type Device interface {
	// Ordinal is the device's index on this host; BusID names it across
	// processes (two ranks on one device are refused).
	Ordinal() int
	BusID() string
	Alloc(nbytes int64) (Ptr, error)
	Free(p Ptr) error
	CopyIn(dst Ptr, src []byte, s Stream) error
	CopyOut(dst []byte, src Ptr, s Stream) error
	NewStream() (Stream, error)
	DestroyStream(s Stream) error
	NewEvent() (Event, error)
	DestroyEvent(e Event) error
	Record(e Event, s Stream) error
	StreamWaitEvent(s Stream, e Event) error
	EventDone(e Event) (bool, error)
}
