package gemm

import "math"

// bfloat16 values are held as their bits, uint16: the top half of the
// float32 with the same value (sign, 8-bit exponent, 7-bit mantissa), the
// layout of tensor.BFloat16 and of the CUDA kernels' __nv_bfloat16.

// BF16 rounds f to the nearest bfloat16, ties to even: the scalar
// reference every conversion path is checked against, bit for bit.
// Subnormals round like any other value (they are not flushed), an
// overflow rounds to ±Inf, and a NaN stays a NaN of the same sign with its
// top payload bits, made quiet (bit 6 set) so that truncation cannot turn
// it into an infinity. This is PyTorch's c10::BFloat16 rounding and the
// CUDA kernels' round_bf16.
func BF16(f float32) uint16 {
	u := math.Float32bits(f)
	if u&0x7fffffff > 0x7f800000 {
		return uint16(u>>16 | 0x40)
	}
	u += 0x7fff + (u>>16)&1
	return uint16(u >> 16)
}

// F32 returns the float32 equal to the bfloat16 h (exact).
func F32(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// Conversion paths, chosen by the Impl's kernel (see [Impl.BF16Kernel]).
const (
	cvtGo         = iota // portable Go
	cvtAVX2              // AVX2 integer rounding
	cvtAVX512            // AVX-512F integer rounding
	cvtAVX512BF16        // VCVTNE2PS2BF16, subnormal groups redone as cvtAVX512
)

// ToBF16 rounds src to bfloat16 into dst (as [BF16] does, bit for bit),
// with the kernel family's vector instructions. It panics when dst is
// shorter than src.
func (g *Impl) ToBF16(dst []uint16, src []float32) {
	if len(dst) < len(src) {
		panic("gemm: ToBF16: dst shorter than src")
	}
	n := 0
	if len(src) >= 16 {
		switch g.cvt {
		case cvtAVX512BF16:
			n = len(src) &^ 31
			f32ToBF16AVX512BF16(&dst[0], &src[0], n)
		case cvtAVX512:
			n = len(src) &^ 31
			f32ToBF16AVX512(&dst[0], &src[0], n)
		case cvtAVX2:
			n = len(src) &^ 15
			f32ToBF16AVX2(&dst[0], &src[0], n)
		}
	}
	toBF16Go(dst[n:], src[n:])
}

// FromBF16 widens src into dst (exact). It panics when dst is shorter than
// src.
func (g *Impl) FromBF16(dst []float32, src []uint16) {
	if len(dst) < len(src) {
		panic("gemm: FromBF16: dst shorter than src")
	}
	n := 0
	switch {
	case len(src) >= 32 && g.cvt >= cvtAVX512:
		n = len(src) &^ 31
		bf16ToF32AVX512(&dst[0], &src[0], n)
	case len(src) >= 16 && g.cvt == cvtAVX2:
		n = len(src) &^ 15
		bf16ToF32AVX2(&dst[0], &src[0], n)
	}
	fromBF16Go(dst[n:], src[n:])
}

// toBF16Go is the portable conversion.
func toBF16Go(dst []uint16, src []float32) {
	dst = dst[:len(src)]
	for i, f := range src {
		dst[i] = BF16(f)
	}
}

func fromBF16Go(dst []float32, src []uint16) {
	dst = dst[:len(src)]
	for i, h := range src {
		dst[i] = math.Float32frombits(uint32(h) << 16)
	}
}
