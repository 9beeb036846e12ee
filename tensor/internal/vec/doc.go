// Package vec holds the vectorised inner loops of tensor's convolution,
// pooling and activation kernels: row additions, ReLU and its gradient
// mask, bias rows, 2×2 max pooling with index capture, and the direct
// convolution tiles.
//
// Every function has a portable Go version (the reference) and an
// assembly version chosen once when the package is initialised: AVX2 for
// the row kernels (vec.go, vec_amd64.s), AVX-512 for the convolution tiles
// (conv.go, conv_avx512_amd64.s). The row kernels give bit-for-bit the
// same results on both paths, including for NaN and signed zeros: ReLU
// follows Go's max(x, 0) (NaN stays NaN, −0 becomes +0) and pooling takes
// each window's first maximum or its last NaN, as tensor.MaxPool2d. The
// convolution tiles agree with their references to float32 rounding.
//
// The transcendental kernels (math.go, math_amd64.s: exp, GELU-tanh and
// its derivative, softmax rows, LayerNorm rows, dot, max, scale) are
// methods of Math, which picks AVX2+FMA assembly or the portable Go
// version of the same algorithm when it is made (NewMath); they are not
// bit-for-bit equal across paths but both meet the error bounds stated
// in math.go, which math_test.go checks against float64.
//
// The functions take slices and lengths and check only what the assembly
// needs to stay inside the slices; the callers in package tensor validate
// shapes.
package vec
