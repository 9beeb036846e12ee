// Package vec holds the vectorised inner loops of tensor's convolution,
// pooling and activation kernels: row additions, ReLU and its gradient
// mask, bias rows and 2×2 max pooling with index capture.
//
// Every function has a portable Go version (the reference, in vec.go) and,
// on amd64 CPUs with AVX2, an assembly version (vec_amd64.s) chosen once
// when the package is initialised. Both give bit-for-bit the same results,
// including for NaN and signed zeros: ReLU follows Go's max(x, 0) (NaN
// stays NaN, −0 becomes +0) and pooling takes each window's first maximum
// or its last NaN, as tensor.MaxPool2d.
//
// The functions take slices and lengths and check only what the assembly
// needs to stay inside the slices; the callers in package tensor validate
// shapes.
package vec
