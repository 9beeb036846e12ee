package nccl

import (
	"errors"
	"fmt"
	"os"
	"unsafe"

	"github.com/ebitengine/purego"

	"github.com/cohortml/cohort/device/internal/libfind"
)

// Spec is how libnccl is looked for (see the package documentation).
var Spec = libfind.Spec{What: "libnccl", Sonames: []string{"libnccl.so.2", "libnccl.so"},
	Wheel: "nvidia/nccl/lib", Override: "COHORT_NCCL_LIBRARY"}

// ErrNotFound is wrapped by Load's error when no NCCL library loads.
var ErrNotFound = errors.New("nccl: libnccl not found")

// UniqueID is ncclUniqueId: the 128 opaque bytes that rank 0 creates and
// every rank of a communicator passes to CommInitRank.
type UniqueID struct{ Internal [128]byte }

// Comm is an ncclComm_t.
type Comm uintptr

// Ptr is a device address; Stream a CUstream (0: the legacy default
// stream).
type (
	Ptr    uintptr
	Stream uintptr
)

// DataType is ncclDataType_t.
type DataType int32

const (
	Int8     DataType = 0
	Uint8    DataType = 1
	Int32    DataType = 2
	Uint32   DataType = 3
	Int64    DataType = 4
	Uint64   DataType = 5
	Float16  DataType = 6
	Float32  DataType = 7
	Float64  DataType = 8
	BFloat16 DataType = 9 // NCCL 2.10 and later
)

// Size returns the element size in bytes.
func (t DataType) Size() int {
	switch t {
	case Int8, Uint8:
		return 1
	case Float16, BFloat16:
		return 2
	case Int32, Uint32, Float32:
		return 4
	default:
		return 8
	}
}

// RedOp is ncclRedOp_t.
type RedOp int32

const (
	Sum  RedOp = 0
	Prod RedOp = 1
	Max  RedOp = 2
	Min  RedOp = 3
	Avg  RedOp = 4 // NCCL 2.10 and later
)

// Lib is the loaded library with its functions resolved. It is safe for
// concurrent use.
type Lib struct {
	Path    string // the file loaded
	Version int    // ncclGetVersion: 22703 is NCCL 2.27.3

	f funcs
}

type funcs struct {
	getVersion        uintptr `sym:"ncclGetVersion"`
	getUniqueID       uintptr `sym:"ncclGetUniqueId"`
	getErrorString    uintptr `sym:"ncclGetErrorString"`
	getLastError      uintptr `sym:"ncclGetLastError"`
	commAbort         uintptr `sym:"ncclCommAbort"`
	commDestroy       uintptr `sym:"ncclCommDestroy"`
	commGetAsyncError uintptr `sym:"ncclCommGetAsyncError"`
	commCount         uintptr `sym:"ncclCommCount"`
	commUserRank      uintptr `sym:"ncclCommUserRank"`
	allReduce         uintptr `sym:"ncclAllReduce"`
	broadcast         uintptr `sym:"ncclBroadcast"`
	reduce            uintptr `sym:"ncclReduce"`
	allGather         uintptr `sym:"ncclAllGather"`
	reduceScatter     uintptr `sym:"ncclReduceScatter"`
	send              uintptr `sym:"ncclSend"`
	recv              uintptr `sym:"ncclRecv"`
	groupStart        uintptr `sym:"ncclGroupStart"`
	groupEnd          uintptr `sym:"ncclGroupEnd"`
	// commInitRank takes the unique id by value (128 bytes on the stack
	// on amd64, by reference on arm64): purego lays the struct out.
	commInitRank func(comm *Comm, nranks int32, id UniqueID, rank int32) int32
}

// Load opens NCCL with the environment read by os.Getenv.
func Load() (*Lib, error) { return LoadEnv(libfind.FromEnv(os.Getenv)) }

// LoadEnv is Load with the environment given.
func LoadEnv(env libfind.Env) (*Lib, error) {
	l := &Lib{}
	h, path, err := env.Load("nccl", Spec, ErrNotFound, libfind.Table(&l.f))
	if err != nil {
		return nil, err
	}
	l.Path = path
	sym, err := purego.Dlsym(h, "ncclCommInitRank")
	if err != nil {
		return nil, fmt.Errorf("nccl: %s: symbol ncclCommInitRank not found: %v", l.Path, err)
	}
	purego.RegisterFunc(&l.f.commInitRank, sym)
	var v int32
	if err := l.call("ncclGetVersion", l.f.getVersion, uintptr(unsafe.Pointer(&v))); err != nil {
		return nil, err
	}
	l.Version = int(v)
	return l, nil
}

// VersionString renders a version as NCCL does: 22703 → "2.27.3" (and the
// old encoding of 2.8 and before, 2804 → "2.8.4").
func VersionString(v int) string {
	if v >= 10000 {
		return fmt.Sprintf("%d.%d.%d", v/10000, v/100%100, v%100)
	}
	return fmt.Sprintf("%d.%d.%d", v/1000, v/100%10, v%100)
}

// call runs an NCCL function and turns its ncclResult_t into a *Error.
//
//go:uintptrescapes
func (l *Lib) call(name string, fn uintptr, args ...uintptr) error {
	r, _, _ := purego.SyscallN(fn, args...)
	return l.result(name, 0, int32(r))
}

// result turns an ncclResult_t into nil or a *Error (with the comm's last
// error text when comm is set).
func (l *Lib) result(name string, comm Comm, r int32) error {
	if r == 0 {
		return nil
	}
	e := &Error{Call: name, Code: Result(r)}
	if l.f.getErrorString != 0 {
		p, _, _ := purego.SyscallN(l.f.getErrorString, uintptr(r))
		e.Msg = libfind.GoString(p)
	}
	if l.f.getLastError != 0 {
		p, _, _ := purego.SyscallN(l.f.getLastError, uintptr(comm))
		e.Last = libfind.GoString(p)
	}
	return e
}

// GetUniqueID creates a new communicator id (rank 0 does, once per
// communicator).
func (l *Lib) GetUniqueID() (UniqueID, error) {
	var id UniqueID
	err := l.call("ncclGetUniqueId", l.f.getUniqueID, uintptr(unsafe.Pointer(&id)))
	return id, err
}

// CommInitRank joins the communicator id as rank of nranks, on the
// current CUDA device; it blocks until every rank has joined.
func (l *Lib) CommInitRank(nranks, rank int, id UniqueID) (Comm, error) {
	var c Comm
	r := l.f.commInitRank(&c, int32(nranks), id, int32(rank))
	if err := l.result("ncclCommInitRank", 0, r); err != nil {
		return 0, err
	}
	return c, nil
}

// CommAbort frees the communicator after stopping its operations in
// flight: the call that unblocks the survivors of a failed peer.
func (l *Lib) CommAbort(c Comm) error {
	return l.call("ncclCommAbort", l.f.commAbort, uintptr(c))
}

// CommDestroy frees a communicator whose operations have completed.
func (l *Lib) CommDestroy(c Comm) error {
	return l.call("ncclCommDestroy", l.f.commDestroy, uintptr(c))
}

// CommAsyncError returns the communicator's asynchronous error: nil while
// it is healthy, a *Error whose Code is InProgress while a nonblocking
// call is still running, and the failure otherwise (a dead peer shows as
// RemoteError or SystemError).
func (l *Lib) CommAsyncError(c Comm) error {
	var r int32
	if err := l.call("ncclCommGetAsyncError", l.f.commGetAsyncError, uintptr(c), uintptr(unsafe.Pointer(&r))); err != nil {
		return err
	}
	return l.result("async error", c, r)
}

// CommCount returns the number of ranks, CommUserRank this rank.
func (l *Lib) CommCount(c Comm) (int, error) {
	var n int32
	err := l.call("ncclCommCount", l.f.commCount, uintptr(c), uintptr(unsafe.Pointer(&n)))
	return int(n), err
}

func (l *Lib) CommUserRank(c Comm) (int, error) {
	var n int32
	err := l.call("ncclCommUserRank", l.f.commUserRank, uintptr(c), uintptr(unsafe.Pointer(&n)))
	return int(n), err
}

// The collectives enqueue on stream s and return: they are complete when
// the stream has run them. Counts are in elements of dt.

func (l *Lib) AllReduce(send, recv Ptr, count int, dt DataType, op RedOp, c Comm, s Stream) error {
	return l.call("ncclAllReduce", l.f.allReduce, uintptr(send), uintptr(recv), uintptr(count), uintptr(dt), uintptr(op), uintptr(c), uintptr(s))
}

func (l *Lib) Broadcast(send, recv Ptr, count int, dt DataType, root int, c Comm, s Stream) error {
	return l.call("ncclBroadcast", l.f.broadcast, uintptr(send), uintptr(recv), uintptr(count), uintptr(dt), uintptr(root), uintptr(c), uintptr(s))
}

func (l *Lib) Reduce(send, recv Ptr, count int, dt DataType, op RedOp, root int, c Comm, s Stream) error {
	return l.call("ncclReduce", l.f.reduce, uintptr(send), uintptr(recv), uintptr(count), uintptr(dt), uintptr(op), uintptr(root), uintptr(c), uintptr(s))
}

// AllGather gathers sendCount elements from every rank into recv (rank
// order).
func (l *Lib) AllGather(send, recv Ptr, sendCount int, dt DataType, c Comm, s Stream) error {
	return l.call("ncclAllGather", l.f.allGather, uintptr(send), uintptr(recv), uintptr(sendCount), uintptr(dt), uintptr(c), uintptr(s))
}

// ReduceScatter leaves recvCount elements (this rank's chunk) in recv.
func (l *Lib) ReduceScatter(send, recv Ptr, recvCount int, dt DataType, op RedOp, c Comm, s Stream) error {
	return l.call("ncclReduceScatter", l.f.reduceScatter, uintptr(send), uintptr(recv), uintptr(recvCount), uintptr(dt), uintptr(op), uintptr(c), uintptr(s))
}

func (l *Lib) Send(p Ptr, count int, dt DataType, peer int, c Comm, s Stream) error {
	return l.call("ncclSend", l.f.send, uintptr(p), uintptr(count), uintptr(dt), uintptr(peer), uintptr(c), uintptr(s))
}

func (l *Lib) Recv(p Ptr, count int, dt DataType, peer int, c Comm, s Stream) error {
	return l.call("ncclRecv", l.f.recv, uintptr(p), uintptr(count), uintptr(dt), uintptr(peer), uintptr(c), uintptr(s))
}

// GroupStart and GroupEnd bracket calls that NCCL must launch together
// (a send and a recv between the same pair, several peers' sends).
func (l *Lib) GroupStart() error { return l.call("ncclGroupStart", l.f.groupStart) }
func (l *Lib) GroupEnd() error   { return l.call("ncclGroupEnd", l.f.groupEnd) }
