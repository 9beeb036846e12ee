// Code generated from device/kernels/cuda/reduce.cu and prelude.cuh; DO NOT EDIT.

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

// ---- reduce.cu ----

// Sums in fp32: of elements (reduce_sum_partial; CPU twin tensor.Sum) and
// of squares (reduce_sumsq_partial; the 2-norm of optim.ClipGradNorm). Two
// stages, so the order of additions depends only on n: each block of the
// first writes its sum to partial[blockIdx.x] (the caller may offset
// partial to gather several tensors' blocks in one array, as global-norm
// clipping does over all gradients), and reduce_final adds the parts
// parts in one block. Results are the same run to run.

#define REDUCE_THREADS 256

extern "C" __global__ void reduce_sum_partial_f32(float* partial, const float* x, long long n) {
	float s = 0.0f;
	GRID_LOOP(i, n) { s += f32(x[i]); }
	s = block_sum(s);
	if (threadIdx.x == 0)
		partial[blockIdx.x] = s;
}

extern "C" __global__ void reduce_sumsq_partial_f32(float* partial, const float* x, long long n) {
	float s = 0.0f;
	GRID_LOOP(i, n) {
		float v = f32(x[i]);
		s += v * v;
	}
	s = block_sum(s);
	if (threadIdx.x == 0)
		partial[blockIdx.x] = s;
}

extern "C" __global__ void reduce_sum_partial_bf16(float* partial, const bf16* x, long long n) {
	float s = 0.0f;
	GRID_LOOP(i, n) { s += f32(x[i]); }
	s = block_sum(s);
	if (threadIdx.x == 0)
		partial[blockIdx.x] = s;
}

extern "C" __global__ void reduce_sumsq_partial_bf16(float* partial, const bf16* x, long long n) {
	float s = 0.0f;
	GRID_LOOP(i, n) {
		float v = f32(x[i]);
		s += v * v;
	}
	s = block_sum(s);
	if (threadIdx.x == 0)
		partial[blockIdx.x] = s;
}

// reduce_final writes (or with accumulate != 0 adds) Σ partial[0:parts]
// into out[0]; one block.
extern "C" __global__ void reduce_final(float* out, const float* partial, int parts, int accumulate) {
	float s = 0.0f;
	for (int i = threadIdx.x; i < parts; i += blockDim.x)
		s += partial[i];
	s = block_sum(s);
	if (threadIdx.x == 0)
		out[0] = accumulate ? out[0] + s : s;
}
