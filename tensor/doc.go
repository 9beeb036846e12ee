// Package tensor implements dense float32 tensors: shapes, strides and
// views over shared storage, and the kernels (elementwise, reductions,
// matmul, convolution, pooling, softmax, normalisation) that autograd and
// nn build on.
//
// # Views
//
// A Tensor is a view (shape, strides, offset) of a storage slice.
// Reshape (of a contiguous tensor), Transpose, T, Permute, Narrow, Slice,
// Select, Unsqueeze, Squeeze and Expand return views that share storage
// with the original, so writes through one are visible through the other;
// Contiguous, Clone and Values copy. FromSlice wraps a caller's slice
// without copying, which is how a parameter or gradient can live inside a
// larger flat buffer.
//
// # Kernels
//
// Binary elementwise ops broadcast under NumPy/PyTorch rules
// (BroadcastShapes). Most ops come in two forms: Add(a, b) allocates its
// result; AddInto(dst, a, b) writes a caller-owned dst (which may be one of
// the inputs, for in-place updates) so hot loops can reuse buffers.
// AddScaled(dst, α, x) is the in-place dst += α·x used to accumulate
// gradients and apply updates. Contiguous operands run tight loops over
// their slices; other layouts (transposed or sliced views, broadcast
// operands) run strided loops over the innermost dimension.
//
// Every matrix product goes through one GEMM (package
// tensor/internal/gemm): MatMul, MatMulInto and Gemm hand transposed views
// to it as transpose flags instead of copying them.
//
// Convolutions are matrix products over unfolded input windows, a chunk of
// samples at a time. With stride 1 the unfolding is "wide" (conv_wide.go):
// each kernel tap's row is one contiguous slice of the padded input, so on
// CPUs with AVX-512 the forward product and the weight gradient read the
// input in place through the taps' offsets (direct tiles) instead of
// copying it; other strides unfold window by window (im2col). The input
// gradient is a GEMM followed by the fold (col2im). Conv2dReLU and
// Conv2dReLUMaxPool2d fuse the activation and pooling that usually follow a
// convolution into its output pass, and their backward passes into its
// output-gradient pass, so the full-size intermediate tensors are never
// stored. The hot inner loops (row additions, bias and ReLU, the ReLU
// mask, 2×2 max pooling with index capture, the convolution tiles) are
// assembly kernels with Go references in tensor/internal/vec.
//
// The transformer's kernels (fused.go) are vectorised and fused:
// GELUTanh and GELUTanhBackward (recomputed from the input, nothing else
// kept), Exp, SoftmaxRows (probabilities and log-sum-exp for
// cross-entropy), the affine LayerNorm and its one-pass backward, and
// AttentionQKV, multi-head attention read and written in place out of the
// fused qkv projection through strided GEMMs, with the scale, causal mask
// and softmax applied in one pass over each score row. They run on
// AVX2+FMA assembly (tensor/internal/vec) unless COHORT_GEMM_KERNEL=go
// selects the portable path; the error bounds (exp ≤ 2 ULP, GELU-tanh
// ≤ 4 ULP + 3·|2u| ULP) are stated and tested there.
//
// Sums and statistics (Sum, SumDim, BatchNormStats, Softmax) accumulate in
// float64; the vectorised kernels (SoftmaxRows, the affine LayerNorm's
// row statistics, AttentionQKV's softmax) sum in float32 over 8 lanes, and
// the LayerNorm weight gradients in float32 blocks of 64 rows added into
// float64 totals.
//
// # Storage reuse
//
// A step allocates the same tensors every time, and fresh memory is dear:
// a page's first touch costs a fault (about 9 µs on some KVM guests), and
// the collector lets the heap grow far past what one step needs before
// it reuses anything. So host storage circulates through one size-keyed
// free list (recycle.go): Recycle hands back storage its owner knows to
// be dead (autograd does so for gradients and transient outputs), Empty
// reuses it without zeroing, New reuses it zeroed, and the convolutions
// take their scratch (unfolded inputs, padded copies, packed weights,
// chunk products) from it and hand it back before returning. From the
// second step on, a LeNet step then leaves 0.85 MiB of garbage instead
// of 2.3 MiB (the pooling indices and the outputs autograd does not yet
// recycle), and those pages, once mapped, stay mapped. The list is
// bounded (64 buffers per length, 128 MiB in all); a buffer is in it at
// most once and referenced by nothing else while there.
//
// # Devices and dtypes
//
// Every tensor carries a Device: CPU (the zero value: host memory, every
// tensor made by New or FromSlice) or an accelerator such as CUDA(0),
// parsed from "cpu", "cuda" or "cuda:1" by ParseDevice. A tensor on an
// accelerator views an opaque Buffer of that device instead of a host
// slice; views (Reshape, T, Narrow, …) work on it as on the host, while
// the host accessors (Storage, Data, At, Set, Item, Values, the Fill*
// draws) panic naming the device. Moves are explicit: t.To(dev) copies
// (and is t itself when t is there already); no op moves its operands.
//
// Each public op checks its operands' devices once, at its entry: host
// operands run the CPU code unchanged (the check is a nil test of each
// operand's buffer, outside every loop); operands on one device go to the
// Backend registered for that device's kind; operands on two devices
// panic, naming the op and both devices ("tensor: MatMul: operands on cpu
// and cuda:0"). That is a panic, not an error, for the reason a shape
// mismatch is one: it is a programmer error in a call whose result is
// the tensor itself, so no caller could act on a returned error. Results
// are allocated on the operands' device (NewOn, EmptyOn, FullOn).
//
// Backends are registered by kind (Register), from the init function of
// the package that implements the kind, as database/sql drivers are: the
// registry is written only at init and read-only afterwards, and the
// device an op runs on is still chosen by its caller, on each tensor.
// Each backend passes the conformance suite in tensor/devicetest: every
// op equal to its CPU twin on fresh random inputs within a stated bound
// (1e-5 relative in float32), forward and backward, moves bit for bit,
// and the mixed-device panic. The ops a backend implements are those of
// the MLP, the LeNet CNN and GPT: elementwise (with broadcasting), GEMM
// and the fused linear layer, reductions, softmax, cross-entropy,
// LayerNorm (LayerNormStats keeps its statistics on the device),
// attention over a fused qkv, convolution, max and average pooling, and
// embedding rows; a backend's optimizer steps and gradient norms are the
// optim.DeviceKernels it also implements. Ops that return host slices
// (MaxDim, ArgMax, Max, SoftmaxRows, the BatchNorm statistics, LayerNorm's
// slice form, the fused convolution-ReLU-pool with its indices, GemmThen's
// host epilogue) have no device form yet and panic on a device, saying
// so; MaxPool2d on a device returns no indices, and its gradient is
// MaxPool2dBackwardFromInput.
//
// The element type is a DType on the tensor, like the device: Float32 for
// every host tensor and every op today. BFloat16 is reserved for device
// buffers (mixed precision on accelerators) and the CPU bf16 kernels to
// come; the ops refuse any other DType at the same entry check until they
// have kernels for it, so adding bf16 extends the check and the backend
// interface rather than redesigning them.
//
// On the host, BFloat16 is today the dtype of a product, not of a tensor:
// GemmAs, MatMulAs, LinearAs, LinearBackwardAs, AttentionQKVAs and the
// Conv2d...As ops take float32 tensors and run their products on operands
// rounded to bfloat16 with float32 accumulation (AVX512-BF16's VDPBF16PS
// where the CPU has it, else widened to the float32 kernels), as
// PyTorch's CPU autocast does, with the error bound autocast.go states;
// Float32 gives the float32 op bit for bit. A Half is a matrix rounded
// once and read by several products (autograd's linear keeps its weight's
// and its input's for the backward pass), in storage reused across steps;
// the other ops round their operands as the GEMM packs them.
//
// # Randomness
//
// FillUniform and FillNormal draw from a *rand.Rand (math/rand/v2) passed
// by the caller; the package has no global generator.
//
// # Errors
//
// Misuse that is a programmer error (mismatched or non-broadcastable
// shapes, out-of-range dimensions or indices) panics with a message
// prefixed "tensor:" naming the op and the shapes involved. Tensors are
// not safe for concurrent mutation; concurrent reads are fine.
package tensor
