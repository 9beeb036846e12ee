package cublas

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"unsafe"

	"github.com/ebitengine/purego"

	"github.com/cohortml/cohort/device/cuda"
	"github.com/cohortml/cohort/device/internal/libfind"
)

// ErrNotFound is wrapped by the error of a library that could not be found.
var ErrNotFound = errors.New("cublas: library not found")

// Spec is how libcublas is looked for; libcublasLt is taken from the same
// directory (or, by soname, from the system loader).
var Spec = libfind.Spec{
	What:    "libcublas",
	Sonames: []string{"libcublas.so.13", "libcublas.so.12", "libcublas.so.11", "libcublas.so"},
	Wheel:   "nvidia/cublas/lib",
}

// Lib is the loaded cuBLAS and cuBLASLt libraries. It is safe for
// concurrent use.
type Lib struct {
	Path, LtPath        string
	Major, Minor, Patch int    // cublasGetProperty
	LtVersion           uint64 // cublasLtGetVersion: 110902 is 11.9.2 (major·10000 + minor·100 + patch)

	f funcs
}

type funcs struct {
	create, destroy, setStream, setMathMode, setWorkspace    uintptr
	getProperty, statusName, statusString                    uintptr
	sgemm, sgemmStridedBatched, gemmEx, gemmStridedBatchedEx uintptr
	ltCreate, ltDestroy, ltGetVersion                        uintptr
}

// Load finds and opens cuBLAS as doc.go describes, with the environment
// read by os.Getenv. It needs no device.
func Load() (*Lib, error) { return LoadEnv(libfind.FromEnv(os.Getenv)) }

// LoadEnv is Load with the environment given.
func LoadEnv(env libfind.Env) (*Lib, error) {
	cands, looked := env.Candidates(Spec)
	var last error
	for _, c := range cands {
		l, err := open(c.Name)
		if err == nil {
			return l, nil
		}
		if !strings.Contains(err.Error(), "cannot open shared object file") || strings.ContainsRune(c.Name, '/') {
			last = err
		}
	}
	return nil, libfind.NotFound("cublas", Spec, looked, last, ErrNotFound)
}

// open loads libcublasLt beside name first (libcublas needs it, and a
// wheel's copy must win over another on the loader's path), then name.
func open(name string) (*Lib, error) {
	base := filepath.Base(name)
	ltName := "libcublasLt" + strings.TrimPrefix(base, "libcublas")
	if dir := filepath.Dir(name); strings.ContainsRune(name, '/') {
		ltName = filepath.Join(dir, ltName)
	}
	lt, err := purego.Dlopen(ltName, purego.RTLD_NOW|purego.RTLD_GLOBAL)
	if err != nil {
		return nil, err
	}
	h, err := purego.Dlopen(name, purego.RTLD_NOW|purego.RTLD_GLOBAL)
	if err != nil {
		return nil, err
	}
	l := &Lib{Path: libfind.Resolve(name), LtPath: libfind.Resolve(ltName)}
	if err := libfind.Symbols("cublas", l.Path, h, map[string]*uintptr{
		"cublasCreate_v2": &l.f.create, "cublasDestroy_v2": &l.f.destroy,
		"cublasSetStream_v2": &l.f.setStream, "cublasSetMathMode": &l.f.setMathMode,
		"cublasSetWorkspace_v2": &l.f.setWorkspace, "cublasGetProperty": &l.f.getProperty,
		"cublasGetStatusName": &l.f.statusName, "cublasGetStatusString": &l.f.statusString,
		"cublasSgemm_v2": &l.f.sgemm, "cublasSgemmStridedBatched": &l.f.sgemmStridedBatched,
		"cublasGemmEx": &l.f.gemmEx, "cublasGemmStridedBatchedEx": &l.f.gemmStridedBatchedEx,
	}); err != nil {
		return nil, err
	}
	if err := libfind.Symbols("cublas", l.LtPath, lt, map[string]*uintptr{
		"cublasLtCreate": &l.f.ltCreate, "cublasLtDestroy": &l.f.ltDestroy, "cublasLtGetVersion": &l.f.ltGetVersion,
	}); err != nil {
		return nil, err
	}
	for i, at := range []*int{&l.Major, &l.Minor, &l.Patch} {
		var v int32
		if r, _, _ := purego.SyscallN(l.f.getProperty, uintptr(i), uintptr(unsafe.Pointer(&v))); r != 0 {
			return nil, fmt.Errorf("cublas: %s: cublasGetProperty: %s", l.Path, l.status(r))
		}
		*at = int(v)
	}
	v, _, _ := purego.SyscallN(l.f.ltGetVersion)
	l.LtVersion = uint64(v)
	return l, nil
}

// Version is "major.minor.patch".
func (l *Lib) Version() string { return fmt.Sprintf("%d.%d.%d", l.Major, l.Minor, l.Patch) }

// Error is a cuBLAS call that failed.
type Error struct {
	Call   string
	Status int    // cublasStatus_t
	Name   string // cublasGetStatusName: "CUBLAS_STATUS_NOT_INITIALIZED"
	Msg    string // cublasGetStatusString
}

func (e *Error) Error() string {
	return fmt.Sprintf("cublas: %s: %s (%d): %s", e.Call, e.Name, e.Status, e.Msg)
}

func (l *Lib) status(r uintptr) string {
	e := l.err("", r)
	return fmt.Sprintf("%s (%d): %s", e.Name, e.Status, e.Msg)
}

func (l *Lib) err(call string, r uintptr) *Error {
	e := &Error{Call: call, Status: int(r)}
	if l.f.statusName != 0 {
		p, _, _ := purego.SyscallN(l.f.statusName, r)
		e.Name = libfind.GoString(p)
	}
	if l.f.statusString != 0 {
		p, _, _ := purego.SyscallN(l.f.statusString, r)
		e.Msg = libfind.GoString(p)
	}
	return e
}

// Pointers converted to uintptr in its arguments are moved to the heap and
// kept alive for the call (as for purego.SyscallN), so a stack copy cannot
// move what the library reads.
//
//go:uintptrescapes
func (l *Lib) call(name string, fn uintptr, args ...uintptr) error {
	if r, _, _ := purego.SyscallN(fn, args...); r != 0 {
		return l.err(name, r)
	}
	return nil
}

// Math modes (cublasMath_t).
const (
	defaultMath      = 0
	tf32TensorOpMath = 3
)

// Handle is a cuBLAS handle bound to one CUDA context and stream. It is
// not safe for concurrent use (as cuBLAS handles are not): use one per
// goroutine, or a lock. Calls enqueue work on the handle's stream and
// return without waiting for it.
type Handle struct {
	l    *Lib
	c    *cuda.Context
	h    uintptr
	tf32 bool
}

// Options configures a handle; the zero value is PyTorch's default.
type Options struct {
	// TF32 lets fp32 GEMMs use TF32 tensor cores (10-bit mantissa inputs,
	// fp32 accumulation), as torch.backends.cuda.matmul.allow_tf32 = True.
	// Off by default: fp32 GEMMs are then computed in full fp32.
	TF32 bool
}

// Create makes a handle in context c (cublasCreate), with the math mode of
// opts. It needs a device.
func (l *Lib) Create(c *cuda.Context, opts Options) (*Handle, error) {
	h := &Handle{l: l, c: c, tf32: opts.TF32}
	if err := h.do("cublasCreate_v2", l.f.create, uintptr(unsafe.Pointer(&h.h))); err != nil {
		return nil, err
	}
	if err := h.SetTF32(opts.TF32); err != nil {
		h.Destroy()
		return nil, err
	}
	return h, nil
}

// do runs a cuBLAS call with the handle's context current on the thread.
// Pointers converted to uintptr in its arguments are moved to the heap and
// kept alive for the call (as for purego.SyscallN), so a stack copy cannot
// move what the library reads.
//
//go:uintptrescapes
func (h *Handle) do(name string, fn uintptr, args ...uintptr) error {
	var err error
	if cerr := h.c.Do(func() { err = h.l.call(name, fn, args...) }); cerr != nil {
		return cerr
	}
	return err
}

// Destroy releases the handle.
func (h *Handle) Destroy() error {
	if h.h == 0 {
		return nil
	}
	hh := h.h
	h.h = 0
	return h.do("cublasDestroy_v2", h.l.f.destroy, hh)
}

// SetStream makes later calls enqueue on s.
func (h *Handle) SetStream(s cuda.Stream) error {
	return h.do("cublasSetStream_v2", h.l.f.setStream, h.h, uintptr(s))
}

// SetTF32 turns TF32 for fp32 GEMMs on or off (see Options.TF32).
func (h *Handle) SetTF32(on bool) error {
	mode := uintptr(defaultMath)
	if on {
		mode = tf32TensorOpMath
	}
	if err := h.do("cublasSetMathMode", h.l.f.setMathMode, h.h, mode); err != nil {
		return err
	}
	h.tf32 = on
	return nil
}

// SetWorkspace gives cuBLAS n bytes of device memory at p as its workspace
// (cublasSetWorkspace), instead of memory it allocates itself; the memory
// must outlive the handle's use of it. CUDA graphs need this.
func (h *Handle) SetWorkspace(p cuda.DevicePtr, n int64) error {
	return h.do("cublasSetWorkspace_v2", h.l.f.setWorkspace, h.h, uintptr(p), uintptr(n))
}

// DataType is a cudaDataType_t.
type DataType int

// The element types cohort uses.
const (
	F32  DataType = 0  // CUDA_R_32F
	F16  DataType = 2  // CUDA_R_16F
	BF16 DataType = 14 // CUDA_R_16BF
)

// Compute types (cublasComputeType_t) and the default algorithm.
const (
	compute32F         = 68          // CUBLAS_COMPUTE_32F
	compute32FFastTF32 = 77          // CUBLAS_COMPUTE_32F_FAST_TF32
	gemmDefault        = ^uintptr(0) // CUBLAS_GEMM_DEFAULT (-1)
)

// Gemm describes C = alpha·op(A)·op(B) + beta·C for row-major matrices
// (as cohort's tensors are): A is M×K after op, B is K×N, C is M×N, with
// leading dimensions LDA, LDB, LDC in elements. Batch > 1 repeats it over
// matrices StrideA, StrideB, StrideC elements apart. The element types
// may differ (bf16 A and B with an fp32 or bf16 C); accumulation is
// always fp32.
type Gemm struct {
	TransA, TransB            bool
	M, N, K                   int
	Alpha, Beta               float32
	A, B, C                   cuda.DevicePtr
	LDA, LDB, LDC             int
	AType, BType, CType       DataType
	StrideA, StrideB, StrideC int64
	Batch                     int
}

func op(t bool) uintptr {
	if t {
		return 1 // CUBLAS_OP_T
	}
	return 0 // CUBLAS_OP_N
}

func (g *Gemm) check() error {
	for _, d := range [...]int{g.M, g.N, g.K, g.LDA, g.LDB, g.LDC} {
		if d < 0 || d > math.MaxInt32 {
			return fmt.Errorf("cublas: gemm: dimension %d outside cuBLAS's 32-bit range (m=%d n=%d k=%d lda=%d ldb=%d ldc=%d)", d, g.M, g.N, g.K, g.LDA, g.LDB, g.LDC)
		}
	}
	if g.M == 0 || g.N == 0 || g.K == 0 {
		return fmt.Errorf("cublas: gemm: empty operand m=%d n=%d k=%d (the caller handles these)", g.M, g.N, g.K)
	}
	return nil
}

// Sgemm enqueues an fp32 GEMM (cublasSgemm, or cublasSgemmStridedBatched
// when Batch > 1); the types in g are ignored. It uses TF32 only if the
// handle allows it.
func (h *Handle) Sgemm(g Gemm) error {
	if err := g.check(); err != nil {
		return err
	}
	// Row-major C = op(A)·op(B) is column-major Cᵀ = op(B)ᵀ·op(A)ᵀ: swap
	// the operands and m with n.
	alpha, beta := g.Alpha, g.Beta
	var err error
	if g.Batch <= 1 {
		err = h.do("cublasSgemm_v2", h.l.f.sgemm, h.h, op(g.TransB), op(g.TransA),
			uintptr(g.N), uintptr(g.M), uintptr(g.K), uintptr(unsafe.Pointer(&alpha)),
			uintptr(g.B), uintptr(g.LDB), uintptr(g.A), uintptr(g.LDA),
			uintptr(unsafe.Pointer(&beta)), uintptr(g.C), uintptr(g.LDC))
	} else {
		err = h.do("cublasSgemmStridedBatched", h.l.f.sgemmStridedBatched, h.h, op(g.TransB), op(g.TransA),
			uintptr(g.N), uintptr(g.M), uintptr(g.K), uintptr(unsafe.Pointer(&alpha)),
			uintptr(g.B), uintptr(g.LDB), uintptr(g.StrideB), uintptr(g.A), uintptr(g.LDA), uintptr(g.StrideA),
			uintptr(unsafe.Pointer(&beta)), uintptr(g.C), uintptr(g.LDC), uintptr(g.StrideC), uintptr(g.Batch))
	}
	runtime.KeepAlive(&alpha)
	runtime.KeepAlive(&beta)
	return err
}

// GemmEx enqueues a mixed-type GEMM with fp32 accumulation (cublasGemmEx,
// or cublasGemmStridedBatchedEx when Batch > 1): bf16 inputs use tensor
// cores; fp32 inputs use TF32 only if the handle allows it.
func (h *Handle) GemmEx(g Gemm) error {
	if err := g.check(); err != nil {
		return err
	}
	compute := uintptr(compute32F)
	if h.tf32 && g.AType == F32 && g.BType == F32 {
		compute = compute32FFastTF32
	}
	alpha, beta := g.Alpha, g.Beta
	var err error
	if g.Batch <= 1 {
		err = h.do("cublasGemmEx", h.l.f.gemmEx, h.h, op(g.TransB), op(g.TransA),
			uintptr(g.N), uintptr(g.M), uintptr(g.K), uintptr(unsafe.Pointer(&alpha)),
			uintptr(g.B), uintptr(g.BType), uintptr(g.LDB), uintptr(g.A), uintptr(g.AType), uintptr(g.LDA),
			uintptr(unsafe.Pointer(&beta)), uintptr(g.C), uintptr(g.CType), uintptr(g.LDC), compute, gemmDefault)
	} else {
		err = h.do("cublasGemmStridedBatchedEx", h.l.f.gemmStridedBatchedEx, h.h, op(g.TransB), op(g.TransA),
			uintptr(g.N), uintptr(g.M), uintptr(g.K), uintptr(unsafe.Pointer(&alpha)),
			uintptr(g.B), uintptr(g.BType), uintptr(g.LDB), uintptr(g.StrideB),
			uintptr(g.A), uintptr(g.AType), uintptr(g.LDA), uintptr(g.StrideA),
			uintptr(unsafe.Pointer(&beta)), uintptr(g.C), uintptr(g.CType), uintptr(g.LDC), uintptr(g.StrideC),
			uintptr(g.Batch), compute, gemmDefault)
	}
	runtime.KeepAlive(&alpha)
	runtime.KeepAlive(&beta)
	return err
}
