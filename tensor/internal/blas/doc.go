// Package blas loads OpenBLAS at run time, without cgo, through
// github.com/ebitengine/purego, and exposes the one routine cohort needs
// from it: row-major single-precision GEMM.
//
// Nothing is linked at build time: a binary built with this package runs on
// machines without OpenBLAS, and [Load] returns an error there, which
// callers turn into a fallback or a skipped test. A loaded library stays
// loaded for the life of the process (OpenBLAS owns worker threads that
// must not be unmapped under them).
package blas
