// Package kernels holds cohort's GPU kernels as CUDA C source, one short
// file per family in cuda/ (embedded with go:embed), and a table that
// tells a runtime how to launch each one. It does no I/O and loads no
// library: device/nvrtc compiles Source(family) to PTX for the device's
// architecture, device/cuda loads the module and launches the functions
// the table names.
//
// # Families and their CPU twins
//
// Every file opens with the CPU op it must equal and the math it shares
// with it (the same GELU form, LayerNorm's biased variance, AdamW's order
// of operations, the mean of the cross-entropy):
//
//	elementwise  add, sub, mul, scale, axpy, fill, relu_fwd/bwd  tensor.AddInto, …, ReLUBackwardInto
//	bias         bias_add, bias_grad (column sum)                 tensor.LinearInto's bias, SumTo
//	gelu         gelu_fwd/bwd, tanh form                          tensor.GELUTanhInto, GELUTanhBackwardInto
//	layernorm    layernorm_fwd/bwd/bwd_reduce (fp32)              tensor.LayerNorm, LayerNormBackward(Add)
//	softmax      softmax_fwd/bwd, row-wise (fp32)                 tensor.Softmax, SoftmaxBackward
//	attention    attention_fwd, attention_bwd_dq, _dkv            tensor.AttentionQKV, AttentionQKVBackward
//	embedding    embedding_fwd, embedding_bwd_wpe/_wte            GPT's embedding, tensor.IndexAddRows
//	classifier   fused_classifier: loss and dlogits in one pass   autograd.CrossEntropy (mean)
//	reduce       reduce_sum/_sumsq_partial, reduce_final          tensor.Sum, optim.ClipGradNorm's norm
//	optim        adam_step, sgd_step, grad_clip                   optim.AdamUpdate, SGDUpdate, ClipGradNorm
//	conv         im2col, col2im                                   tensor's im2colInto, col2imAdd
//	pool         maxpool_fwd/bwd, avgpool_fwd/bwd (fp32)          tensor.MaxPool2d, AvgPool2d and backward
//	cast         cast_f32_bf16, cast_bf16_f32                     PyTorch's .to(torch.bfloat16)
//
// The attention kernels are flash-attention style (online softmax, no
// T×T probabilities in memory, log-sum-exp saved for the backward pass),
// for head dimensions up to 128, causal or not. Reductions that feed
// parameters (bias and LayerNorm gradients, the embedding scatter-add,
// sums, col2im, pooling gradients) add in an order fixed by the problem's
// size, never with atomics, so a run repeats to the bit. The optimizer
// steps, the fp32 elementwise ops, col2im, max pooling's gradient and the
// embedding gradients perform the CPU's float32 operations in the CPU's
// order (explicitly rounded intrinsics, which the compiler does not fuse
// into FMAs) and so give its bits; the others differ from the CPU by
// float32 rounding (their fast paths sum in other orders, expf and rsqrtf
// are within 2 ULP).
//
// # Two storage types from one template
//
// Kernels that bf16 autocast runs in bf16 (casts, attention, GELU, bias,
// elementwise, the classifier's logits, the optimizer's gradients, im2col)
// are written once between "// cohort:dtypes" and "// cohort:end" lines,
// with floatX for the element type and names ending in _X. Instantiate
// repeats such a block for float (suffix _f32) and bf16 (suffix _bf16).
// bf16 is defined in cuda/prelude.cuh with the layout of CUDA's
// __nv_bfloat16 (NVRTC has no cuda_bf16.h of its own); kernels widen it
// with f32(x), compute in fp32 and round once when they store (round_X:
// cvt.rn.bf16.f32, round to nearest even). The generated text of every
// family has a golden copy, testdata/generated/FAMILY.cu.golden (go test
// -update rewrites them), so a change to a kernel shows as a diff without
// a GPU.
//
// # The table
//
// Table lists every kernel: its name, its family, its parameters as the
// source declares them (the tests parse the extern "C" __global__
// signatures and compare), the Problem fields it reads, and Launch, the
// grid, block and dynamic shared memory for a problem size, or an error
// naming the limit a problem exceeds (a head dimension over 128; a
// LayerNorm wider than 1536 in its backward pass). testdata/launch is a
// transcript of geometries at GPT-2 small's sizes.
//
// # bf16 error bounds
//
// What a bf16 kernel may differ from its fp32 CPU twin by, for inputs
// given in fp32 and rounded to bf16 by the GPU path (as autocast does),
// with u = 2⁻⁸ the unit roundoff of bf16 (8 significant bits; fp32's is
// 2⁻²⁴, negligible beside it). The GPU check measures these on fresh
// N(0, 1) inputs as ‖gpu − cpu‖ / ‖cpu‖ (normwise) and must find them
// within the stated check; per-element worst cases are given for
// reference.
//
//   - Casts: |x̂ − x| ≤ u·|x| per element, exactly (round to nearest even);
//     normwise ≤ u = 3.9e-3. bf16 → fp32 is exact.
//   - Elementwise with k rounded inputs and one rounded output (add, sub,
//     mul, scale, axpy, ReLU, bias add, GELU): per element the error is at
//     most (k + 1)·u times the sum of the magnitudes of the terms (for a
//     product, (k + 1)·u relative: 3u = 1.2% for mul). The roundings are
//     independent with zero mean and variance u²/3 relative, so normwise
//     the error is about √((k + 1)/3)·u ≤ u·1.2 on random inputs. Check:
//     normwise ≤ 2u = 7.8e-3 (for GELU's gradient, which crosses zero at
//     x ≈ −0.75, normwise only).
//   - A K-long dot product with bf16 inputs and fp32 accumulation (cuBLAS
//     GEMMs, attention's scores): |ĉ − c| ≤ (2u + u² + K·2⁻²⁴)·Σ|a_k·b_k| +
//     u·|c|. The input roundings contribute about √(2/3)·u·‖a∘b‖₂ with
//     ‖a∘b‖₂ ≈ |c| for random inputs, and the output rounding u/√3, so
//     normwise ≈ u whatever K (K·2⁻²⁴ stays below u up to K = 65536).
//     Check: normwise ≤ 2u = 7.8e-3.
//   - Attention (bf16 q, k, v and y; fp32 scores, softmax and sums): a
//     score error δs changes p_j by p_j·(δs_j − Σ p·δs), at most 2·max|δs|
//     relative; δs has rms scale·√(2/3)·u·√hd·σ_q·σ_k from q and k's
//     rounding, which is √(2/3)·u for unit-variance q, k at scale = 1/√hd.
//     y adds v's rounding (u/√3) and its own (u/√3). Normwise ≈ 1.5u to 2u.
//     Check: normwise ≤ 4u = 1.6e-2, for y and for each part of dqkv (the
//     gradients also pass dy's rounding through two more products).
//   - The fused classifier with bf16 logits: the log-sum-exp and the target
//     logit each move by at most u·max|x|, so the loss by ≤ 2u·max|x|
//     absolute; dlogits add their rounding, u relative. Check: loss within
//     2u·max|x|, dlogits normwise ≤ 2u + 2u·max|x|.
//   - Reductions, LayerNorm, softmax and the optimizer run in fp32 under
//     autocast as in PyTorch; their bf16-gradient variants (reduce_*_bf16,
//     adam_step_bf16, sgd_step_bf16) read gradients that are already bf16,
//     so they add only fp32 rounding: normwise ≤ 1e-5, the fp32 bound.
//
// fp32 kernels must be within 1e-5 normwise of the CPU (TF32 off); those
// listed above as giving the CPU's bits must match it exactly.
//
// # Testing without a GPU
//
// Besides the goldens and the table checks, the tests compile every family
// with the real NVRTC for compute_80 and compute_90 where it is installed
// (and require PTX without local memory), and run every kernel on a CPU
// emulator of the CUDA execution model (testdata/emu/cuda_emu.h, built
// with g++: each CUDA thread a coroutine, __syncthreads and warp shuffles
// as barriers, a barrier that can never complete reported as a deadlock),
// launched through the table, against its CPU twin. On the emulator the
// bf16 kernels measure, on N(0, 1) inputs: mul 3.2e-3, GELU 1.9e-3 and its
// gradient 2.3e-3, attention's y 2.9e-3 and dqkv 3.3e-3, the classifier's
// dlogits 1.9e-3, all below u = 3.9e-3 and the checks above. The emulator
// cannot show speed, nor races that only a real GPU's scheduling exposes:
// those are the GPU check's.
package kernels
