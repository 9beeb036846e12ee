package vec

import "golang.org/x/sys/cpu"

// useAVX2 and useAVX512 select the assembly kernels; they are fixed at
// initialisation (tests switch them to check the Go versions).
var (
	useAVX2   = cpu.X86.HasAVX2 && cpu.X86.HasAVX
	useAVX512 = cpu.X86.HasAVX512F
)

// Implemented in vec_amd64.s. Lengths and strides count float32 elements.

//go:noescape
func addAVX2(dst, src *float32, n int)

//go:noescape
func sumRowsAVX2(dst, src *float32, stride, rows, cols int)

//go:noescape
func addRowsAVX2(dst *float32, dstStride int, src *float32, srcStride int, rows, cols int)

// biasAVX2 writes src (+ bias when flags has flagBias) (then max(·, 0)
// when flags has flagReLU) into dst.
//
//go:noescape
func biasAVX2(dst, src *float32, n int, bias float32, flags int)

//go:noescape
func reluMaskAVX2(dst, grad, y *float32, n int)

// maxPool2PlaneAVX2 is MaxPool2Plane for cols ≥ 8, maxPool2Plane4AVX2 for
// 4 ≤ cols < 8.
//
//go:noescape
func maxPool2PlaneAVX2(dst *float32, arg *int32, src *float32, rows, cols, stride int, bias float32, flags, w int)

//go:noescape
func maxPool2Plane4AVX2(dst *float32, arg *int32, src *float32, rows, cols, stride int, bias float32, flags, w int)

// Implemented in conv_avx512_amd64.s.

//go:noescape
func convTileAVX512(k int, a *float32, offs *int, x, c *float32, ldc, rows int, nmask uint64)

//go:noescape
func dot4x6AVX512(n, m int, a0, a1, a2, a3, b0, b1, b2, b3, b4, b5 *float32, aStride, bStride int, acc *float32)

// hasFMA gates the transcendental kernels (math_amd64.s), which fuse
// multiply and add.
var hasFMA = cpu.X86.HasFMA

// Implemented in math_amd64.s; n is a multiple of 8 (Max: and at least 8).

//go:noescape
func expAVX2(dst, src *float32, n int)

//go:noescape
func expShiftSumAVX2(dst, src *float32, n int, scale, shift float32) float32

//go:noescape
func geluTanhAVX2(dst, src *float32, n int)

//go:noescape
func geluTanhGradAVX2(dst, grad, x *float32, n int)

//go:noescape
func softmaxGradAVX2(ds, p *float32, n int, dot, scale float32)

// The AVX-512F versions (math_amd64.s): lengths are multiples of 16.

//go:noescape
func expAVX512(dst, src *float32, n int)

//go:noescape
func expShiftSumAVX512(dst, src *float32, n int, scale, shift float32) float32

//go:noescape
func geluTanhAVX512(dst, src *float32, n int)

//go:noescape
func softmaxRowsAVX512(s *float32, T int, causal bool)

//go:noescape
func softmaxGradRowsAVX512(ds, p *float32, T int, causal bool, scale float32)

//go:noescape
func geluTanhGradAVX512(dst, grad, x *float32, n int)

//go:noescape
func maxAVX2(src *float32, n int) float32

//go:noescape
func dotAVX2(a, b *float32, n int) float32

//go:noescape
func scaleAVX2(dst, src *float32, n int, a float32)

// n is a positive multiple of 8.
//
//go:noescape
func layerNormRowAVX2(dst, src, w, b *float32, n int, invN, eps float32, stats *float32)

// n is a positive multiple of 8.
//
//go:noescape
func layerNormGradRowAVX2(dx, grad, x, w, dw, db *float32, n int, mean, rstd, invN float32)

// Two consecutive rows of n, a positive multiple of 8.
//
//go:noescape
func layerNormRows2AVX2(dst, src, w, b *float32, n int, invN, eps float32, stats *float32)

// Two consecutive rows of n, a positive multiple of 8.
//
//go:noescape
func layerNormGradRows2AVX2(dx, grad, x, w, dw, db *float32, n int, mean0, rstd0, mean1, rstd1, invN float32)
