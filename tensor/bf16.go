package tensor

import "github.com/cohortml/cohort/tensor/internal/gemm"

// ToBFloat16 rounds src to bfloat16 bits into dst, to nearest with ties
// to even (PyTorch's c10::BFloat16 rounding: subnormals kept, overflow to
// ±Inf, NaN kept a quiet NaN), with the CPU's vector conversion where it
// has one; every path is bit-exact to the scalar reference. The bits are
// the top half of the float32 of the same value, the layout of a
// BFloat16 buffer, of safetensors' "BF16" and of PyTorch's
// BFloat16Storage. It panics when dst is shorter than src.
func ToBFloat16(dst []uint16, src []float32) {
	if len(dst) < len(src) {
		panic("tensor: ToBFloat16: dst shorter than src")
	}
	gemm.ToBF16(dst[:len(src)], src)
}

// FromBFloat16 widens the bfloat16 bits src into dst (exact: every
// bfloat16 is a float32). It panics when dst is shorter than src.
func FromBFloat16(dst []float32, src []uint16) {
	if len(dst) < len(src) {
		panic("tensor: FromBFloat16: dst shorter than src")
	}
	gemm.FromBF16(dst[:len(src)], src)
}
