// Package gemmbench measures cohort's sgemm against OpenBLAS on the same
// machine in the same process: the shapes that matter for training (square
// sizes and the anchor MLP's forward and backward products), each at
// several thread counts, the two implementations alternating round by
// round so that load from other processes hits both alike.
//
// It backs `cohort bench gemm`; the kernels themselves live in
// tensor/internal/gemm.
package gemmbench
