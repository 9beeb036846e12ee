// Package cublas binds NVIDIA's cuBLAS at run time, without cgo, through
// github.com/ebitengine/purego: the GEMMs a training step needs, fp32
// (cublasSgemm, strided-batched) and mixed precision (cublasGemmEx,
// cublasGemmStridedBatchedEx: bf16 inputs, fp32 accumulation).
//
// cohort uses cuBLAS rather than its own GEMM kernels on the GPU: NVIDIA
// tunes it for every architecture, and reaching its tensor-core throughput
// by hand is a project of its own; the product is the same one PyTorch
// calls, which makes comparisons with it fair.
//
// # Numerics
//
// fp32 GEMMs run in full fp32 by default, as PyTorch's
// (torch.backends.cuda.matmul.allow_tf32 = False); Options.TF32 lets them
// use TF32 tensor cores. bf16 GEMMs accumulate in fp32.
//
// # Layout
//
// Matrices are row-major, as cohort's tensors; the package swaps operands
// to call column-major cuBLAS (row-major C = A·B is column-major
// Cᵀ = Bᵀ·Aᵀ), so callers never transpose.
//
// # Finding the library
//
// libcublas (sonames .13, .12, .11) is looked for like NVRTC: in
// COHORT_CUDA_LIB_DIR (when set, the only place), CUDA_HOME/lib64,
// CUDA_PATH/lib64, /usr/local/cuda*/lib64, pip's wheels
// (site-packages/nvidia/cu13/lib, nvidia/cublas/lib), then the system
// loader; libcublasLt is loaded from the same directory first. A missing
// library is one line naming every place looked, wrapping [ErrNotFound].
// cuBLASLt is loaded and its version read; its matmul API is not bound yet.
//
// # Ownership, concurrency, blocking
//
// A [*Lib] is safe for concurrent use and needs no device. A [*Handle]
// (one per context) is not safe for concurrent use; its GEMMs enqueue on
// its stream and return before the product is computed; operands are the
// caller's device memory and must stay allocated until the stream has
// passed the call.
package cublas
