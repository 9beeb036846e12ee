// Package cudatensor is tensor's backend for NVIDIA GPUs: importing it
// registers the device kind "cuda" (tensor.CUDA(i)), so programs that
// want CUDA import it for its side effect and move tensors and modules
// with To and nn.To.
//
// Each device is opened on first use (or by Init): the driver through
// device/cuda, NVRTC and cuBLAS found at run time, the device's primary
// context, one compute stream on which every op of the device is queued
// (so ops run in program order and a host read waits for what came
// before it), device/alloc's caching allocator over the device's memory
// (Stats gives allocated, reserved and peak bytes), and one cuBLAS handle
// on that stream with TF32 off, as PyTorch's default. A device that cannot
// be opened gives one error line naming what is missing and where it was
// looked for, from Init or as the panic of the first move to the device.
//
// Ops launch the CUDA C kernels of device/kernels, compiled by NVRTC for
// the device's compute capability on first use of a family (cached on
// disk by device/nvrtc) and loaded once per device; products go through
// cuBLAS (fp32 Sgemm, strided-batched where the batch folds). Every
// launch's arguments are checked against the kernel table's parameter
// list. Three kernels device/kernels does not have live here (strided.cu):
// the strided copy behind views and broadcasts, and the elementwise ops
// no model needs but the conformance suite covers (division, max, min,
// exp, log, …). The implementation path of each tensor.Backend and
// optim.DeviceKernels method is listed in paths.go, with the forms that
// have no kernel: those panic naming the op and the device; nothing falls
// back to the CPU.
//
// Attention runs the flash kernels, which keep each score row's
// log-sum-exp instead of the T×T probabilities: the log-sum-exp
// [B, nHead, T] is the state the forward pass saves for the backward one
// (tensor.Backend.Attention), so the probabilities are never made; the
// backward pass reads it and recomputes the output rows from qkv.
//
// Storage is float32; bf16 buffers and autocast are not implemented here
// yet (tensor's BFloat16 is reserved). Running out of device memory panics
// with the allocator's error: the size asked, what is allocated and
// reserved, and the remedies.
package cudatensor
