package gemm

import (
	"fmt"
	"runtime"
	"strconv"
	"strings"
)

// Environment variables read by [OptionsFromEnv].
const (
	EnvThreads     = "COHORT_NUM_THREADS"
	EnvBLAS        = "COHORT_BLAS"
	EnvKernel      = "COHORT_GEMM_KERNEL"
	EnvOpenBLASLib = "COHORT_OPENBLAS_LIB"
)

// Backend names for [Options.BLAS].
const (
	BLASAuto     = "auto"
	BLASGo       = "go"       // cohort's own kernels
	BLASOpenBLAS = "openblas" // OpenBLAS loaded at run time
)

// Kernel names for [Options.Kernel].
const (
	KernelAuto   = "auto"
	KernelAVX512 = "avx512"
	KernelAVX2   = "avx2"
	// KernelAVX512BF16 is the AVX-512 family with the AVX512-BF16
	// (VDPBF16PS) kernel for bfloat16 products; the others widen bfloat16
	// to float32 for theirs.
	KernelAVX512BF16 = "avx512bf16"
	// KernelAMX is the AVX-512 family with the AMX tile kernel
	// (TDPBF16PS) for bfloat16 products (gemm_amx.go; not yet run on AMX
	// hardware). It needs AMX-BF16 and the kernel's permission to use
	// tile state, requested once per process.
	KernelAMX = "amx"
	KernelGo  = "go"
)

// DefaultOpenBLASLib is the library [New] loads when Options.OpenBLASLib is
// empty.
const DefaultOpenBLASLib = "libopenblas.so.0"

// Options configures an [Impl]. The zero value works: all CPUs, the best
// backend and kernel available.
type Options struct {
	// Threads is the number of goroutines one call may use (and the
	// OpenBLAS thread count). 0 means the number of CPUs the process may
	// use: runtime.NumCPU(), or GOMAXPROCS when that is lower (a
	// container's CPU quota), read when the Impl is built.
	Threads int

	// BLAS selects the backend: "go" runs cohort's kernels; "openblas"
	// requires OpenBLAS and fails when it cannot be loaded; "auto" (or "")
	// picks cohort's assembly kernel when the CPU has one (AVX-512, where
	// it outruns the AVX2 kernels of the OpenBLAS 0.3 releases that
	// distributions ship, or AVX2+FMA, where the two are on a par) or
	// Kernel names one, and otherwise OpenBLAS when it loads, and
	// otherwise the portable Go kernel. [Impl.String] says what was
	// chosen.
	BLAS string

	// Kernel selects cohort's micro-kernel: "amx", "avx512bf16",
	// "avx512", "avx2", "go", or "auto" (or "") for the best the CPU
	// supports. "amx" is "avx512" for float32 products and the AMX tile
	// kernel for bfloat16 ones; auto picks it only when CPUID reports
	// AMX-BF16, Linux grants the tile state and the kernel passes its
	// self-check.
	// "avx512bf16" is "avx512" for float32 products and the VDPBF16PS
	// kernel for bfloat16 ones (GemmBF16), which every other kernel runs by
	// widening to float32. Asking for a kernel the CPU lacks is an error.
	Kernel string

	// OpenBLASLib is the file name or path handed to dlopen; "" means
	// [DefaultOpenBLASLib].
	OpenBLASLib string
}

// OptionsFromEnv reads Options from the environment through getenv
// (normally os.Getenv). Unset variables leave the zero value; malformed
// ones are an error naming the variable.
func OptionsFromEnv(getenv func(string) string) (Options, error) {
	var o Options
	if s := strings.TrimSpace(getenv(EnvThreads)); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			return Options{}, fmt.Errorf("gemm: %s=%q: want a positive integer", EnvThreads, s)
		}
		o.Threads = n
	}
	o.BLAS = strings.ToLower(strings.TrimSpace(getenv(EnvBLAS)))
	o.Kernel = strings.ToLower(strings.TrimSpace(getenv(EnvKernel)))
	o.OpenBLASLib = strings.TrimSpace(getenv(EnvOpenBLASLib))
	if err := o.validate(); err != nil {
		return Options{}, err
	}
	return o, nil
}

// maxThreads bounds Options.Threads: far more than any CPU this runs on,
// small enough that a typo cannot start a million goroutines per call.
const maxThreads = 4096

func (o Options) validate() error {
	if o.Threads < 0 || o.Threads > maxThreads {
		return fmt.Errorf("gemm: threads %d: want 0 (all CPUs) to %d", o.Threads, maxThreads)
	}
	switch o.BLAS {
	case "", BLASAuto, BLASGo, BLASOpenBLAS:
	default:
		return fmt.Errorf("gemm: %s=%q: want %s, %s or %s", EnvBLAS, o.BLAS, BLASAuto, BLASGo, BLASOpenBLAS)
	}
	switch o.Kernel {
	case "", KernelAuto, KernelAMX, KernelAVX512BF16, KernelAVX512, KernelAVX2, KernelGo:
	default:
		return fmt.Errorf("gemm: %s=%q: want %s, %s, %s, %s, %s or %s", EnvKernel, o.Kernel, KernelAuto, KernelAMX, KernelAVX512BF16, KernelAVX512, KernelAVX2, KernelGo)
	}
	return nil
}

// threads resolves Threads' zero value.
func (o Options) threads() int {
	if o.Threads == 0 {
		return min(runtime.NumCPU(), runtime.GOMAXPROCS(0))
	}
	return o.Threads
}
