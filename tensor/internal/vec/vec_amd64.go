package vec

import "golang.org/x/sys/cpu"

// useAVX2 selects the assembly kernels; it is fixed at initialisation.
var useAVX2 = cpu.X86.HasAVX2 && cpu.X86.HasAVX

// Implemented in vec_amd64.s. Lengths and strides count float32 elements.

//go:noescape
func addAVX2(dst, src *float32, n int)

//go:noescape
func addRowsAVX2(dst *float32, dstStride int, src *float32, srcStride int, rows, cols int)

// biasAVX2 writes src (+ bias when flags has flagBias) (then max(·, 0)
// when flags has flagReLU) into dst.
//
//go:noescape
func biasAVX2(dst, src *float32, n int, bias float32, flags int)

//go:noescape
func reluMaskAVX2(dst, grad, y *float32, n int)

// maxPool2AVX2 is MaxPool2 for n windows, n a multiple of 8.
//
//go:noescape
func maxPool2AVX2(dst *float32, arg *int32, r0, r1 *float32, n int, bias float32, flags, base, w int)

// maxPool2x4AVX2 is MaxPool2 for n windows, n a multiple of 4.
//
//go:noescape
func maxPool2x4AVX2(dst *float32, arg *int32, r0, r1 *float32, n int, bias float32, flags, base, w int)
