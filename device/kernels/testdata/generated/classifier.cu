// Code generated from device/kernels/cuda/classifier.cu and prelude.cuh; DO NOT EDIT.

// Definitions every kernel family shares; the generator puts this text in
// front of each family's source. Kernels compute in fp32 whatever their
// storage type and round once when they store.

// bf16 is bfloat16 storage with the bit layout of CUDA's __nv_bfloat16 (a
// float's upper 16 bits). It is defined here because NVRTC has no
// cuda_bf16.h of its own and the toolkit headers may be absent.
struct __align__(2) bf16 {
	unsigned short bits;
};

// NVRTC has no math.h: INFINITY as the C library defines it.
#ifndef INFINITY
#define INFINITY __int_as_float(0x7f800000)
#endif

// f32 widens a stored value to float (exact for bf16).
__device__ __forceinline__ float f32(float x) { return x; }
__device__ __forceinline__ float f32(bf16 x) { return __uint_as_float(((unsigned int)x.bits) << 16); }

// round_f32 and round_bf16 store a float result, rounding to nearest even.
__device__ __forceinline__ float round_f32(float x) { return x; }
__device__ __forceinline__ bf16 round_bf16(float x) {
	bf16 r;
	asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(r.bits) : "f"(x));
	return r;
}

// GRID_LOOP runs its body for i = every element of [0, n) this thread owns
// in a grid-stride loop.
#define GRID_LOOP(i, n) \
	for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (long long)gridDim.x * blockDim.x)

__device__ __forceinline__ float warp_sum(float v) {
	for (int o = 16; o > 0; o >>= 1)
		v += __shfl_xor_sync(0xffffffffu, v, o);
	return v;
}

__device__ __forceinline__ float warp_max(float v) {
	for (int o = 16; o > 0; o >>= 1)
		v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
	return v;
}

// block_sum returns the sum of v over the block to every thread. blockDim.x
// must be a multiple of 32 (at most 1024) and every thread must call it.
// The order of additions is fixed by the block size: results are the same
// run to run.
__device__ float block_sum(float v) {
	__shared__ float part[32];
	int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
	v = warp_sum(v);
	__syncthreads(); // part may still be read by a previous call
	if (lane == 0)
		part[w] = v;
	__syncthreads();
	v = lane < (int)(blockDim.x >> 5) ? part[lane] : 0.0f;
	return warp_sum(v);
}

// block_max is block_sum's twin for the maximum.
__device__ float block_max(float v) {
	__shared__ float part[32];
	int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
	v = warp_max(v);
	__syncthreads();
	if (lane == 0)
		part[w] = v;
	__syncthreads();
	v = lane < (int)(blockDim.x >> 5) ? part[lane] : -INFINITY;
	return warp_max(v);
}

// ---- classifier.cu ----

// The fused classifier: softmax over the vocabulary, cross-entropy loss
// and its gradient in one kernel, one block per row, with the logits
// overwritten by dlogits (as llm.c's fused_classifier). CPU twin:
// autograd.CrossEntropy on [rows, V] with ReduceMean (and IgnoreIndex when
// set): loss_r = lse_r − x[r, target_r] with lse_r = m + log Σ e^(x − m),
// and dlogits = (softmax − onehot(target))·dscale, where the caller passes
// dscale = upstream gradient / (number of rows not ignored). A row whose
// target is ignore_index gets loss 0 and dlogits 0. losses holds the
// per-row losses in fp32; their sum (reduce_sum) times dscale is the mean.
// Targets must be in [0, V) or ignore_index: the caller checks them on the
// host, where they come from, as the CPU op does. Label smoothing is not
// implemented here. Math is fp32 for both storage
// types of the logits.

#define CLS_THREADS 512

extern "C" __global__ void fused_classifier_f32(float* logits, float* losses, const long long* targets, int rows,
                                              int V, float dscale, long long ignore_index) {
	long long o = (long long)blockIdx.x * V;
	long long target = targets[blockIdx.x];
	bool ignored = target == ignore_index;
	// One pass for each thread's maximum and its sum of e^(x − max).
	float m = -INFINITY, s = 0.0f;
	for (int j = threadIdx.x; j < V; j += blockDim.x) {
		float x = f32(logits[o + j]);
		if (x > m) {
			s = s * expf(m - x) + 1.0f;
			m = x;
		} else {
			s += expf(x - m);
		}
	}
	float M = block_max(m);
	float S = block_sum(m == -INFINITY ? 0.0f : s * expf(m - M));
	float lse = M + logf(S);
	// Read by thread 0 before any thread writes (the block reductions above
	// end in barriers after which the writes start).
	if (threadIdx.x == 0)
		losses[blockIdx.x] = ignored ? 0.0f : lse - f32(logits[o + target]);
	__syncthreads();
	for (int j = threadIdx.x; j < V; j += blockDim.x) {
		float p = expf(f32(logits[o + j]) - lse);
		float g = ignored ? 0.0f : (p - (j == target ? 1.0f : 0.0f)) * dscale;
		logits[o + j] = round_f32(g);
	}
}

extern "C" __global__ void fused_classifier_bf16(bf16* logits, float* losses, const long long* targets, int rows,
                                              int V, float dscale, long long ignore_index) {
	long long o = (long long)blockIdx.x * V;
	long long target = targets[blockIdx.x];
	bool ignored = target == ignore_index;
	// One pass for each thread's maximum and its sum of e^(x − max).
	float m = -INFINITY, s = 0.0f;
	for (int j = threadIdx.x; j < V; j += blockDim.x) {
		float x = f32(logits[o + j]);
		if (x > m) {
			s = s * expf(m - x) + 1.0f;
			m = x;
		} else {
			s += expf(x - m);
		}
	}
	float M = block_max(m);
	float S = block_sum(m == -INFINITY ? 0.0f : s * expf(m - M));
	float lse = M + logf(S);
	// Read by thread 0 before any thread writes (the block reductions above
	// end in barriers after which the writes start).
	if (threadIdx.x == 0)
		losses[blockIdx.x] = ignored ? 0.0f : lse - f32(logits[o + target]);
	__syncthreads();
	for (int j = threadIdx.x; j < V; j += blockDim.x) {
		float p = expf(f32(logits[o + j]) - lse);
		float g = ignored ? 0.0f : (p - (j == target ? 1.0f : 0.0f)) * dscale;
		logits[o + j] = round_bf16(g);
	}
}
