// Package gemmtest is the conformance suite every sgemm implementation
// passes: cohort's kernels (each of them, each thread count) and OpenBLAS.
// It compares against gemm.Naive with a tolerance derived from the
// float32 rounding bound, and checks that nothing outside C's m×n view is
// written and that padding in A and B is never read (it holds NaN).
package gemmtest
