// Package gemm is cohort's single-precision matrix multiply: the one place
// dense math goes through, so faster kernels replace the implementation
// without touching callers.
//
// # Implementations
//
// An [Impl] is one way of running sgemm, fixed when it is built:
//
//   - cohort's own kernels: BLIS-style cache blocking (MC×KC blocks of A in
//     L2, KC×NR slivers of B in L1) with both operands packed into
//     contiguous slivers, and a register-blocked micro-kernel written in Go
//     assembly. amd64 CPUs with AVX-512F get a 14×32 zmm kernel, CPUs with
//     AVX2 and FMA a 6×16 ymm kernel, everything else a portable Go kernel.
//     Transposed operands are handled by the packing routines, so all four
//     transpose combinations run the same micro-kernel. Work is split over
//     a fixed number of goroutines by tiles of C, which the call owns and
//     joins before it returns.
//   - OpenBLAS, loaded at run time from libopenblas.so.0 without cgo
//     (package tensor/internal/blas), when present and asked for.
//
// # Configuration
//
// [Options] chooses the backend, kernel and thread count; [OptionsFromEnv]
// reads them from the environment, which package-level [Sgemm] does once,
// at its first call:
//
//	COHORT_NUM_THREADS   goroutines (and OpenBLAS threads) per call; default: the number of CPUs
//	COHORT_BLAS          auto | go | openblas   (auto: see [Options.BLAS])
//	COHORT_GEMM_KERNEL   auto | avx512 | avx2 | go   (cohort's kernel; auto = the best the CPU has)
//	COHORT_OPENBLAS_LIB  file name or path of the OpenBLAS library; default libopenblas.so.0
//
// An invalid setting makes [Default] return an error and [Sgemm] panic
// with it, so a misconfiguration is never silently replaced by another
// kernel.
//
// # Correctness
//
// Every implementation is checked against the naive triple loop [Naive] on
// random shapes that include 0, 1, odd sizes, sizes that are not multiples
// of the tile, all transpose combinations, leading dimensions larger than
// the row length, and alpha/beta values including 0 (package gemmtest).
package gemm

//go:generate go run ./internal/asmgen -dir .
