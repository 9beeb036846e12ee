package mpi

import (
	"fmt"
	"unsafe"

	"github.com/ebitengine/purego"
)

// A Handle is an MPI_Comm, MPI_Datatype, MPI_Op or MPI_Request of either
// ABI. Out-parameters are *Handle words the caller zeroes first.
type Handle = uintptr

// Error is a failed MPI call: the function, its code and MPI's message.
type Error struct {
	Func string
	Code int
	Msg  string
}

func (e *Error) Error() string {
	return fmt.Sprintf("mpi: %s: %s (error %d)", e.Func, e.Msg, e.Code)
}

// Err returns nil for Success, else an *Error naming fn with MPI's message.
func (l *Lib) Err(fn string, code int32) error {
	if code == Success {
		return nil
	}
	buf := make([]byte, 512) // MPI_MAX_ERROR_STRING in both ABIs
	var n int32
	msg := fmt.Sprintf("error code %d", code)
	if r := l.call(l.errorString, uintptr(code), uintptr(unsafe.Pointer(&buf[0])), uintptr(unsafe.Pointer(&n))); r == Success && n > 0 && int(n) <= len(buf) {
		msg = string(buf[:n])
	}
	return &Error{Func: fn, Code: int(code), Msg: msg}
}

// call invokes fn and returns its int result. Like purego.SyscallN it is
// marked uintptrescapes: a pointer converted to uintptr in the argument
// list of a call to it (uintptr(unsafe.Pointer(&x)), written out in the
// call, not in a helper) is moved to the heap and kept alive for the
// call, so a stack growth cannot move what the library writes into.
//
//go:uintptrescapes
func (l *Lib) call(fn uintptr, args ...uintptr) int32 {
	r, _, _ := purego.SyscallN(fn, args...)
	return int32(r)
}

// InitThread calls MPI_Init_thread(NULL, NULL, required, &provided) unless
// MPI is already initialised (then it reports MPI_Query_thread's level as
// ThreadSingle's lower bound: the caller must be conservative).
func (l *Lib) InitThread(required int) (provided int, err error) {
	var flag int32
	if err := l.Err("MPI_Initialized", l.call(l.initialized, uintptr(unsafe.Pointer(&flag)))); err != nil {
		return 0, err
	}
	if flag != 0 {
		return ThreadSingle, nil
	}
	var p int32
	if err := l.Err("MPI_Init_thread", l.call(l.initThread, 0, 0, uintptr(required), uintptr(unsafe.Pointer(&p)))); err != nil {
		return 0, err
	}
	return int(p), nil
}

// Finalize calls MPI_Finalize unless MPI is already finalised.
func (l *Lib) Finalize() error {
	var flag int32
	if err := l.Err("MPI_Finalized", l.call(l.finalized, uintptr(unsafe.Pointer(&flag)))); err != nil || flag != 0 {
		return err
	}
	return l.Err("MPI_Finalize", l.call(l.finalize))
}

// Abort calls MPI_Abort(comm, code): the launcher ends every process.
func (l *Lib) Abort(comm Handle, code int) error {
	return l.Err("MPI_Abort", l.call(l.abort, comm, uintptr(code)))
}

// CommRank and CommSize return the caller's rank in comm and comm's size.
func (l *Lib) CommRank(comm Handle) (int, error) {
	var r int32
	err := l.Err("MPI_Comm_rank", l.call(l.commRank, comm, uintptr(unsafe.Pointer(&r))))
	return int(r), err
}

func (l *Lib) CommSize(comm Handle) (int, error) {
	var n int32
	err := l.Err("MPI_Comm_size", l.call(l.commSize, comm, uintptr(unsafe.Pointer(&n))))
	return int(n), err
}

// CommDup duplicates comm (a collective call over comm).
func (l *Lib) CommDup(comm Handle) (Handle, error) {
	var out uint64
	err := l.Err("MPI_Comm_dup", l.call(l.commDup, comm, uintptr(unsafe.Pointer(&out))))
	return Handle(out), err
}

// CommSplit splits comm by color (Undefined: no new communicator, and the
// result is CommNull), ordering the new ranks by key.
func (l *Lib) CommSplit(comm Handle, color, key int) (Handle, error) {
	var out uint64
	err := l.Err("MPI_Comm_split", l.call(l.commSplit, comm, uintptr(color), uintptr(key), uintptr(unsafe.Pointer(&out))))
	return Handle(out), err
}

// CommFree frees comm.
func (l *Lib) CommFree(comm Handle) error {
	c := uint64(comm)
	return l.Err("MPI_Comm_free", l.call(l.commFree, uintptr(unsafe.Pointer(&c))))
}

// ErrorsReturn sets MPI_ERRORS_RETURN on comm: failed calls on it return
// their code instead of aborting the job.
func (l *Lib) ErrorsReturn(comm Handle) error {
	return l.Err("MPI_Comm_set_errhandler", l.call(l.commSetErrhandler, comm, l.Handles.ErrorsReturn))
}

// TagUpperBound returns comm's MPI_TAG_UB attribute (at least 32767).
func (l *Lib) TagUpperBound(comm Handle) (int, error) {
	var val *int32
	var flag int32
	if err := l.Err("MPI_Comm_get_attr", l.call(l.commGetAttr, comm, l.Handles.TagUB, uintptr(unsafe.Pointer(&val)), uintptr(unsafe.Pointer(&flag)))); err != nil {
		return 0, err
	}
	if flag == 0 || val == nil {
		return 32767, nil // the standard's minimum
	}
	return int(*val), nil
}

// The nonblocking calls below start an op and write its request into
// *req. Every pointer they are given must stay valid, and the buffers
// untouched, until Test reports the request complete.

// Iallreduce reduces count elements of buf in place across comm.
func (l *Lib) Iallreduce(buf unsafe.Pointer, count int, dt, op, comm Handle, req *uint64) int32 {
	return l.call(l.iallreduce, l.InPlace, uintptr(buf), uintptr(count), dt, op, comm, uintptr(unsafe.Pointer(req)))
}

// Ibcast broadcasts root's buf.
func (l *Lib) Ibcast(buf unsafe.Pointer, count int, dt Handle, root int, comm Handle, req *uint64) int32 {
	return l.call(l.ibcast, uintptr(buf), uintptr(count), dt, uintptr(root), comm, uintptr(unsafe.Pointer(req)))
}

// Ireduce reduces into root's buf: in place at root, from buf elsewhere.
func (l *Lib) Ireduce(buf unsafe.Pointer, count int, dt, op Handle, root, me int, comm Handle, req *uint64) int32 {
	send, recv := uintptr(buf), uintptr(0)
	if me == root {
		send, recv = l.InPlace, uintptr(buf)
	}
	return l.call(l.ireduce, send, recv, uintptr(count), dt, op, uintptr(root), comm, uintptr(unsafe.Pointer(req)))
}

// Iallgather gathers count elements from every rank into out; a nil in
// gathers in place (MPI_IN_PLACE: this rank's block of out is its input).
func (l *Lib) Iallgather(in, out unsafe.Pointer, count int, dt, comm Handle, req *uint64) int32 {
	src := uintptr(in)
	if in == nil && count > 0 {
		src = l.InPlace
	}
	return l.call(l.iallgather, src, uintptr(count), dt, uintptr(out), uintptr(count), dt, comm, uintptr(unsafe.Pointer(req)))
}

// IreduceScatterBlock reduces in (size·count elements) and leaves block
// rank of the result (count elements) in out.
func (l *Lib) IreduceScatterBlock(in, out unsafe.Pointer, count int, dt, op, comm Handle, req *uint64) int32 {
	return l.call(l.ireduceScatterBlock, uintptr(in), uintptr(out), uintptr(count), dt, op, comm, uintptr(unsafe.Pointer(req)))
}

// Ialltoall exchanges count-element blocks.
func (l *Lib) Ialltoall(in, out unsafe.Pointer, count int, dt, comm Handle, req *uint64) int32 {
	return l.call(l.ialltoall, uintptr(in), uintptr(count), dt, uintptr(out), uintptr(count), dt, comm, uintptr(unsafe.Pointer(req)))
}

// Igather gathers count elements from every rank into root's out.
func (l *Lib) Igather(in, out unsafe.Pointer, count int, dt Handle, root int, comm Handle, req *uint64) int32 {
	return l.call(l.igather, uintptr(in), uintptr(count), dt, uintptr(out), uintptr(count), dt, uintptr(root), comm, uintptr(unsafe.Pointer(req)))
}

// Iscatter sends block j of root's in to rank j's out.
func (l *Lib) Iscatter(in, out unsafe.Pointer, count int, dt Handle, root int, comm Handle, req *uint64) int32 {
	return l.call(l.iscatter, uintptr(in), uintptr(count), dt, uintptr(out), uintptr(count), dt, uintptr(root), comm, uintptr(unsafe.Pointer(req)))
}

// Isend and Irecv move count elements to or from peer with tag.
func (l *Lib) Isend(buf unsafe.Pointer, count int, dt Handle, peer, tag int, comm Handle, req *uint64) int32 {
	return l.call(l.isend, uintptr(buf), uintptr(count), dt, uintptr(peer), uintptr(tag), comm, uintptr(unsafe.Pointer(req)))
}

func (l *Lib) Irecv(buf unsafe.Pointer, count int, dt Handle, peer, tag int, comm Handle, req *uint64) int32 {
	return l.call(l.irecv, uintptr(buf), uintptr(count), dt, uintptr(peer), uintptr(tag), comm, uintptr(unsafe.Pointer(req)))
}

// Ibarrier starts a barrier.
func (l *Lib) Ibarrier(comm Handle, req *uint64) int32 {
	return l.call(l.ibarrier, comm, uintptr(unsafe.Pointer(req)))
}

// Status is storage for an MPI_Status of either ABI (24 bytes in Open
// MPI, 20 in MPICH).
type Status [4]uint64

// Request is an op's MPI_Request with the storage MPI_Test needs. Keep it
// in a heap object (a field of the op) for the op's lifetime: Test passes
// MPI the addresses of its fields through an argument array inside it, so
// that polling allocates nothing (a variadic call with pointers converted
// in place would move a fresh argument slice to the heap on every poll).
type Request struct {
	Req  uint64 // the MPI_Request the nonblocking calls write
	St   Status // the MPI_Status of the completed op
	flag int32
	args [3]uintptr
}

// Test reports whether r's request is complete, filling r.St (or
// ignoring the status when noStatus). A completed request is freed by MPI
// and r.Req reset.
func (l *Lib) Test(r *Request, noStatus bool) (bool, int32) {
	r.flag = 0
	r.args = [3]uintptr{uintptr(unsafe.Pointer(&r.Req)), uintptr(unsafe.Pointer(&r.flag)), uintptr(unsafe.Pointer(&r.St))}
	if noStatus {
		r.args[2] = l.StatusIgnore
	}
	code, _, _ := purego.SyscallN(l.test, r.args[:]...)
	return r.flag != 0, int32(code)
}

// GetCount returns the number of dt elements a completed receive got.
func (l *Lib) GetCount(st *Status, dt Handle) (int, error) {
	var n int32
	err := l.Err("MPI_Get_count", l.call(l.getCount, uintptr(unsafe.Pointer(st)), dt, uintptr(unsafe.Pointer(&n))))
	return int(n), err
}
