package tensor

import "github.com/cohortml/cohort/tensor/internal/gemm"

// GEMMInfo describes the dense-math backend of this process (what
// `cohort version` prints).
type GEMMInfo struct {
	// Backend is "go" (cohort's own kernels) or "openblas" (COHORT_BLAS).
	Backend string
	// Kernel is cohort's micro-kernel in use: "avx512", "avx2" or "go"
	// (portable Go); "" with OpenBLAS. COHORT_GEMM_KERNEL can force a
	// slower one.
	Kernel string
	// Kernels are those this CPU can run, slowest first.
	Kernels []string
	// Threads is how many threads one product may use (COHORT_NUM_THREADS).
	Threads int
	// BF16Kernel is the path of bfloat16 products (GemmAs): "amx" (AMX
	// tiles, TDPBF16PS), "avx512bf16" (VDPBF16PS), or "widen/" and the float32 kernel they run on after
	// widening their operands (a CPU without AVX512-BF16, or
	// COHORT_GEMM_KERNEL naming another kernel).
	BF16Kernel string
}

// GEMM returns the backend that matrix products use, setting it up from
// the environment as the first product would; the error says why it
// could not be (COHORT_BLAS=openblas without the library, say).
func GEMM() (GEMMInfo, error) {
	info := GEMMInfo{Kernels: gemm.Kernels()}
	g, err := gemm.Default()
	if err != nil {
		return info, err
	}
	info.Backend, info.Kernel, info.Threads, info.BF16Kernel = g.Backend(), g.Kernel(), g.Threads(), g.BF16Kernel()
	return info, nil
}
