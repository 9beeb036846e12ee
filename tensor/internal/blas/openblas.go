package blas

import (
	"errors"
	"fmt"
	"math"
	"runtime"
	"sync"
	"unsafe"

	"github.com/ebitengine/purego"
)

// ErrUnavailable is wrapped by Load's error when the library or one of
// its symbols cannot be found.
var ErrUnavailable = errors.New("blas: library unavailable")

// OpenBLAS is a loaded OpenBLAS library. Its methods are safe for
// concurrent use; note that OpenBLAS's thread count is one setting for the
// whole process.
type OpenBLAS struct {
	name       string
	sgemm      uintptr // sgemm_: the Fortran interface, every argument by reference
	setThreads uintptr // openblas_set_num_threads(int)
	getThreads uintptr // openblas_get_num_threads(void) int
	config     string

	args sync.Pool // *sgemmArgs
}

// sgemmArgs holds the by-reference arguments of one sgemm_ call. They live
// on the heap (pooled) because the callee reads them through pointers.
type sgemmArgs struct {
	transA, transB byte
	m, n, k        int32
	lda, ldb, ldc  int32
	alpha, beta    float32
	// call is the argument list, kept here so that passing it does not
	// allocate. It holds addresses as integers: everything they point to
	// is kept alive explicitly until the call returns (Go does not move
	// heap objects, and these are all heap objects or the caller's slices).
	call [13]uintptr
}

// Load opens the OpenBLAS library name (a file name searched the usual
// dlopen way, or a path) and resolves its symbols. The error wraps
// ErrUnavailable when the library or a symbol is missing.
func Load(name string) (*OpenBLAS, error) {
	h, err := purego.Dlopen(name, purego.RTLD_NOW|purego.RTLD_LOCAL)
	if err != nil {
		return nil, fmt.Errorf("%w: dlopen %s: %v", ErrUnavailable, name, err)
	}
	l := &OpenBLAS{name: name}
	for _, s := range []struct {
		name string
		addr *uintptr
	}{
		{"sgemm_", &l.sgemm},
		{"openblas_set_num_threads", &l.setThreads},
		{"openblas_get_num_threads", &l.getThreads},
	} {
		p, err := purego.Dlsym(h, s.name)
		if err != nil || p == 0 {
			return nil, fmt.Errorf("%w: %s: symbol %s: %v", ErrUnavailable, name, s.name, err)
		}
		*s.addr = p
	}
	if p, err := purego.Dlsym(h, "openblas_get_config"); err == nil && p != 0 {
		var getConfig func() string
		purego.RegisterFunc(&getConfig, p)
		l.config = getConfig()
	}
	l.args.New = func() any { return new(sgemmArgs) }
	return l, nil
}

// Name returns the name Load was given.
func (l *OpenBLAS) Name() string { return l.name }

// Config returns OpenBLAS's build description (version, target core,
// maximum threads), or "" when the library does not report it.
func (l *OpenBLAS) Config() string { return l.config }

// Threads returns OpenBLAS's current thread count.
func (l *OpenBLAS) Threads() int {
	r, _, _ := purego.SyscallN(l.getThreads)
	return int(int32(r))
}

// SetThreads sets OpenBLAS's thread count (process-wide) if it differs
// from the current one. n < 1 is treated as 1.
func (l *OpenBLAS) SetThreads(n int) {
	n = max(n, 1)
	if l.Threads() != n {
		purego.SyscallN(l.setThreads, uintptr(n))
	}
}

// Sgemm computes C = alpha·op(A)·op(B) + beta·C for row-major matrices with
// the semantics of gemm.Sgemm. The caller has checked the dimensions and
// that every addressed element lies inside the slices; Sgemm panics if a
// dimension or leading dimension does not fit OpenBLAS's 32-bit integers.
func (l *OpenBLAS) Sgemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	for _, d := range [...]int{m, n, k, lda, ldb, ldc} {
		if d > math.MaxInt32 {
			panic(fmt.Sprintf("blas: sgemm: dimension %d exceeds OpenBLAS's 32-bit limit (m=%d n=%d k=%d lda=%d ldb=%d ldc=%d)", d, m, n, k, lda, ldb, ldc))
		}
	}
	if m == 0 || n == 0 || k == 0 {
		panic(fmt.Sprintf("blas: sgemm: empty operand m=%d n=%d k=%d (the caller handles these)", m, n, k))
	}
	// Row-major C = op(A)·op(B) is column-major Cᵀ = op(B)ᵀ·op(A)ᵀ, and a
	// row-major matrix read as column-major is its transpose: swap the
	// operands and the dimensions m, n.
	p := l.args.Get().(*sgemmArgs)
	p.transA, p.transB = trans(transB), trans(transA)
	p.m, p.n, p.k = int32(n), int32(m), int32(k)
	p.lda, p.ldb, p.ldc = int32(ldb), int32(lda), int32(ldc)
	p.alpha, p.beta = alpha, beta
	p.call = [13]uintptr{
		uintptr(unsafe.Pointer(&p.transA)), uintptr(unsafe.Pointer(&p.transB)),
		uintptr(unsafe.Pointer(&p.m)), uintptr(unsafe.Pointer(&p.n)), uintptr(unsafe.Pointer(&p.k)),
		uintptr(unsafe.Pointer(&p.alpha)),
		uintptr(unsafe.Pointer(unsafe.SliceData(b))), uintptr(unsafe.Pointer(&p.lda)),
		uintptr(unsafe.Pointer(unsafe.SliceData(a))), uintptr(unsafe.Pointer(&p.ldb)),
		uintptr(unsafe.Pointer(&p.beta)),
		uintptr(unsafe.Pointer(unsafe.SliceData(c))), uintptr(unsafe.Pointer(&p.ldc)),
	}
	purego.SyscallN(l.sgemm, p.call[:]...)
	runtime.KeepAlive(a)
	runtime.KeepAlive(b)
	runtime.KeepAlive(c)
	runtime.KeepAlive(p)
	p.call = [13]uintptr{}
	l.args.Put(p)
}

func trans(t bool) byte {
	if t {
		return 'T'
	}
	return 'N'
}
