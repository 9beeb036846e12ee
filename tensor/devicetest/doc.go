// Package devicetest is the conformance suite every device backend passes
// (a tensor.Backend, and the optim.DeviceKernels it provides): Run checks
// each op the backend implements, forward and backward, on fresh random
// inputs of several shapes (odd ones, empty ones, strided and broadcast
// views), against the same op on the CPU, within a stated bound; that
// moves between the host and the device round-trip bit for bit; that host
// accessors on a device tensor panic naming the device; and that an op
// given operands on two devices panics naming the op and both devices.
//
// The bound is on the norm of the difference relative to the norm of the
// CPU result, ‖dev − cpu‖₂ / ‖cpu‖₂ ≤ RelTol (1e-5 by default, what fp32
// kernels reordering their sums reach; TF32 must be off), taken over each
// output tensor; NaNs must sit where the CPU's are. The fake device of the
// repository's tests runs the CPU twins and passes with RelTol 0.
//
// Inputs are drawn from a PCG seeded by Options.Seed, or by the clock when
// it is 0; the seed is logged, so a failure reproduces.
package devicetest
