// Package tensor implements dense float32 tensors: shapes, strides and
// views over shared storage, and the kernels (elementwise, reductions,
// matmul, convolution, pooling) that autograd and nn build on.
//
// Misuse that is a programmer error (mismatched shapes, out-of-range
// dimensions) panics with a message prefixed "tensor:" naming the op and the
// shapes involved.
package tensor
