//go:build !amd64

package gemm

func hasAVX512BF16() bool { return false }

func bf16AVX512Arch() *bf16Arch { panic("gemm: no AVX512-BF16 kernel on this architecture") }

func f32ToBF16AVX512BF16(dst *uint16, src *float32, n int) {
	panic("gemm: no AVX512-BF16 conversion on this architecture")
}

func f32ToBF16AVX512(dst *uint16, src *float32, n int) {
	panic("gemm: no AVX-512 conversion on this architecture")
}

func bf16ToF32AVX512(dst *float32, src *uint16, n int) {
	panic("gemm: no AVX-512 conversion on this architecture")
}

func packBF16Rows(dst []uint32, src []uint16, ld, n, kc, w int) bool { return false }

func packBF16Cols(dst []uint32, src []uint16, ld, n, kc, w int) bool { return false }

func f32ToBF16AVX2(dst *uint16, src *float32, n int) {
	panic("gemm: no AVX2 conversion on this architecture")
}

func bf16ToF32AVX2(dst *float32, src *uint16, n int) {
	panic("gemm: no AVX2 conversion on this architecture")
}
