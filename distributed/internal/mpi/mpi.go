package mpi

import (
	"errors"
	"fmt"
	"strings"
	"unsafe"

	"github.com/ebitengine/purego"
)

// ErrUnavailable is wrapped by Load's error when no MPI library can be
// opened or one lacks a symbol.
var ErrUnavailable = errors.New("mpi: library unavailable")

// ABI names the handle conventions of a library.
type ABI int

const (
	OpenMPI ABI = iota + 1 // libmpi.so.40: handles are addresses of globals
	MPICH                  // libmpi.so.12: handles are integer constants
)

func (a ABI) String() string {
	switch a {
	case OpenMPI:
		return "Open MPI"
	case MPICH:
		return "MPICH"
	}
	return fmt.Sprintf("abi(%d)", int(a))
}

// Thread support levels (the same values in both ABIs).
const (
	ThreadSingle     = 0
	ThreadFunneled   = 1
	ThreadSerialized = 2
	ThreadMultiple   = 3
)

// Success is MPI_SUCCESS; Undefined is MPI_UNDEFINED (both ABIs).
const (
	Success   = 0
	Undefined = -32766
)

// Handles holds the predefined handles and magic values of one ABI.
type Handles struct {
	CommWorld, CommNull                uintptr
	Float, Double, Int64, Uint16, Byte uintptr
	Sum, Max, Min, Prod                uintptr
	ErrorsReturn                       uintptr
	InPlace, StatusIgnore              uintptr
	TagUB                              uintptr // the MPI_TAG_UB attribute key
}

// mpichHandles are the values of MPICH's mpi.h, shared by every library
// of the MPICH ABI initiative.
var mpichHandles = Handles{
	CommWorld: 0x44000000, CommNull: 0x04000000,
	Float: 0x4c00040a, Double: 0x4c00080b, Int64: 0x4c00083a, Uint16: 0x4c00023c, Byte: 0x4c00010d,
	Sum: 0x58000003, Max: 0x58000001, Min: 0x58000002, Prod: 0x58000004,
	ErrorsReturn: 0x54000001,
	InPlace:      ^uintptr(0), // (void *)-1
	StatusIgnore: 1,
	TagUB:        0x64400001,
}

// ompiSymbols names the globals whose addresses are Open MPI's handles.
var ompiSymbols = []struct {
	name string
	at   func(*Handles) *uintptr
}{
	{"ompi_mpi_comm_world", func(h *Handles) *uintptr { return &h.CommWorld }},
	{"ompi_mpi_comm_null", func(h *Handles) *uintptr { return &h.CommNull }},
	{"ompi_mpi_float", func(h *Handles) *uintptr { return &h.Float }},
	{"ompi_mpi_double", func(h *Handles) *uintptr { return &h.Double }},
	{"ompi_mpi_int64_t", func(h *Handles) *uintptr { return &h.Int64 }},
	{"ompi_mpi_uint16_t", func(h *Handles) *uintptr { return &h.Uint16 }},
	{"ompi_mpi_byte", func(h *Handles) *uintptr { return &h.Byte }},
	{"ompi_mpi_op_sum", func(h *Handles) *uintptr { return &h.Sum }},
	{"ompi_mpi_op_max", func(h *Handles) *uintptr { return &h.Max }},
	{"ompi_mpi_op_min", func(h *Handles) *uintptr { return &h.Min }},
	{"ompi_mpi_op_prod", func(h *Handles) *uintptr { return &h.Prod }},
	{"ompi_mpi_errors_return", func(h *Handles) *uintptr { return &h.ErrorsReturn }},
}

// openMPIHandles resolves Open MPI's handles with lookup (Dlsym).
func openMPIHandles(lookup func(string) (uintptr, error)) (Handles, error) {
	h := Handles{InPlace: 1, StatusIgnore: 0, TagUB: 0} // MPI_TAG_UB is the first attribute key
	for _, s := range ompiSymbols {
		p, err := lookup(s.name)
		if err != nil || p == 0 {
			return Handles{}, fmt.Errorf("%w: symbol %s: %v", ErrUnavailable, s.name, err)
		}
		*s.at(&h) = p
	}
	return h, nil
}

// Lib is a loaded MPI library.
type Lib struct {
	Name    string // the file Load opened
	ABI     ABI
	Version string // MPI_Get_library_version
	Handles

	initThread, finalize, finalized, initialized, abort uintptr
	commRank, commSize, commDup, commSplit, commFree    uintptr
	commSetErrhandler, commGetAttr, errorString         uintptr
	iallreduce, ibcast, ireduce, iallgather             uintptr
	ireduceScatterBlock, ialltoall, igather, iscatter   uintptr
	isend, irecv, ibarrier, test, getCount              uintptr
}

// DefaultNames are the libraries Load tries, in order, when given none.
var DefaultNames = []string{"libmpi.so.40", "libmpi.so.12", "libmpi.so"}

// Load opens the first of names that dlopen finds (DefaultNames if none
// are given), recognises its ABI and resolves the functions. The library
// is opened RTLD_GLOBAL: Open MPI's plug-ins resolve their symbols against
// it. The error wraps ErrUnavailable.
func Load(names ...string) (*Lib, error) {
	if len(names) == 0 {
		names = DefaultNames
	}
	var errs []string
	for _, name := range names {
		h, err := purego.Dlopen(name, purego.RTLD_NOW|purego.RTLD_GLOBAL)
		if err != nil {
			errs = append(errs, fmt.Sprintf("%s: %v", name, err))
			continue
		}
		l, err := open(h, name)
		if err != nil {
			return nil, err
		}
		return l, nil
	}
	return nil, fmt.Errorf("%w: %s", ErrUnavailable, strings.Join(errs, "; "))
}

func open(h uintptr, name string) (*Lib, error) {
	lookup := func(s string) (uintptr, error) { return purego.Dlsym(h, s) }
	l := &Lib{Name: name}
	for _, f := range []struct {
		name string
		at   *uintptr
	}{
		{"MPI_Init_thread", &l.initThread}, {"MPI_Finalize", &l.finalize},
		{"MPI_Finalized", &l.finalized}, {"MPI_Initialized", &l.initialized},
		{"MPI_Abort", &l.abort},
		{"MPI_Comm_rank", &l.commRank}, {"MPI_Comm_size", &l.commSize},
		{"MPI_Comm_dup", &l.commDup}, {"MPI_Comm_split", &l.commSplit},
		{"MPI_Comm_free", &l.commFree}, {"MPI_Comm_set_errhandler", &l.commSetErrhandler},
		{"MPI_Comm_get_attr", &l.commGetAttr}, {"MPI_Error_string", &l.errorString},
		{"MPI_Iallreduce", &l.iallreduce}, {"MPI_Ibcast", &l.ibcast},
		{"MPI_Ireduce", &l.ireduce}, {"MPI_Iallgather", &l.iallgather},
		{"MPI_Ireduce_scatter_block", &l.ireduceScatterBlock}, {"MPI_Ialltoall", &l.ialltoall},
		{"MPI_Igather", &l.igather}, {"MPI_Iscatter", &l.iscatter},
		{"MPI_Isend", &l.isend}, {"MPI_Irecv", &l.irecv}, {"MPI_Ibarrier", &l.ibarrier},
		{"MPI_Test", &l.test}, {"MPI_Get_count", &l.getCount},
	} {
		p, err := lookup(f.name)
		if err != nil || p == 0 {
			return nil, fmt.Errorf("%w: %s: symbol %s: %v", ErrUnavailable, name, f.name, err)
		}
		*f.at = p
	}
	if p, err := lookup("MPI_Get_library_version"); err == nil && p != 0 {
		buf := make([]byte, 8192) // MPICH's MPI_MAX_LIBRARY_VERSION_STRING; Open MPI's is 256
		var n int32
		purego.SyscallN(p, uintptr(unsafe.Pointer(&buf[0])), uintptr(unsafe.Pointer(&n)))
		if n > 0 && int(n) <= len(buf) {
			l.Version = strings.TrimRight(strings.TrimSpace(string(buf[:n])), "\x00")
		}
	}
	abi, err := detect(lookup, l.Version)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	l.ABI = abi
	switch abi {
	case OpenMPI:
		if l.Handles, err = openMPIHandles(lookup); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
	case MPICH:
		l.Handles = mpichHandles
	}
	return l, nil
}

// detect recognises the ABI: Open MPI by its exported handle objects,
// MPICH and its derivatives by their version string.
func detect(lookup func(string) (uintptr, error), version string) (ABI, error) {
	if p, err := lookup("ompi_mpi_comm_world"); err == nil && p != 0 {
		return OpenMPI, nil
	}
	for _, s := range []string{"MPICH", "Intel(R) MPI", "MVAPICH", "CRAY MPICH"} {
		if strings.Contains(version, s) {
			return MPICH, nil
		}
	}
	return 0, fmt.Errorf("%w: unknown MPI ABI (neither Open MPI's symbols nor an MPICH version string; version %q)", ErrUnavailable, version)
}
