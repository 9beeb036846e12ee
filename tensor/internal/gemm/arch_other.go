//go:build !amd64

package gemm

func hasAVX512() bool   { return false }
func hasAVX2() bool     { return false }
func avx512Arch() *arch { panic("gemm: no AVX-512 kernel on this architecture") }
func avx2Arch() *arch   { panic("gemm: no AVX2 kernel on this architecture") }

func dotAVX512x4x6(k int, a0, a1, a2, a3, b0, b1, b2, b3, b4, b5, acc *float32) {
	panic("gemm: no AVX-512 kernel on this architecture")
}

func avx512WideArch() *arch { panic("gemm: no AVX-512 kernel on this architecture") }

func kernelAVX512x6x64r(k int, a *float32, lda int, b, c *float32, ldc int, alpha, beta float32, rows int, nmask uint64) {
	panic("gemm: no AVX-512 kernel on this architecture")
}
