//go:build !amd64

package gemm

// runRowA is never reached off amd64: no rowAKernel exists there, so
// useRowA is false.
func (g *Impl) runRowA(m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	panic("gemm: the row-A path has no kernel on this architecture")
}

// lowerNT is never reached off amd64 either: SgemmLowerNT takes it only
// with a rowAKernel.
func (g *Impl) lowerNT(m, k int, alpha float32, a []float32, lda int, b []float32, ldb int, c []float32, ldc int) {
	panic("gemm: the row-A path has no kernel on this architecture")
}
