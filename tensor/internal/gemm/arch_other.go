//go:build !amd64

package gemm

func hasAVX512() bool   { return false }
func hasAVX2() bool     { return false }
func avx512Arch() *arch { panic("gemm: no AVX-512 kernel on this architecture") }
func avx2Arch() *arch   { panic("gemm: no AVX2 kernel on this architecture") }
