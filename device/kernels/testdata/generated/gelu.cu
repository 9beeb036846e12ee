// Code generated from device/kernels/cuda/gelu.cu and prelude.cuh; DO NOT EDIT.

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

// ---- gelu.cu ----

// GELU, tanh form ("gelu_new", GPT-2's): y = ½x·(1 + tanh(u)) with
// u = √(2/π)·(x + 0.044715·x³), computed as x·σ(2u) = x / (1 + e^(−2u)),
// which has no cancellation for negative x. CPU twins: tensor.GELUTanhInto
// (gelu_fwd) and tensor.GELUTanhBackwardInto (gelu_bwd: dy·y′ with
// y′ = σ + x·σ·(e·σ)·2·√(2/π)·(1 + 3·0.044715·x²), σ = σ(2u), e = e^(−2u)).
// The fused linear+GELU epilogue of the CPU (gemm.SgemmEpilogue) computes
// the same function.

#define GELU_K 0.7978845608028654f // √(2/π)
#define GELU_C 0.044715f

extern "C" __global__ void gelu_fwd_f32(float* out, const float* x, long long n) {
	GRID_LOOP(i, n) {
		float v = f32(x[i]);
		float e = expf(-2.0f * GELU_K * (v + GELU_C * v * v * v));
		out[i] = round_f32(v / (1.0f + e));
	}
}

extern "C" __global__ void gelu_bwd_f32(float* dx, const float* dy, const float* x, long long n) {
	GRID_LOOP(i, n) {
		float v = f32(x[i]);
		float e = expf(-2.0f * GELU_K * (v + GELU_C * v * v * v));
		float s = 1.0f / (1.0f + e);
		float d = s + v * s * (e * s) * 2.0f * GELU_K * (1.0f + 3.0f * GELU_C * v * v);
		dx[i] = round_f32(f32(dy[i]) * d);
	}
}

extern "C" __global__ void gelu_fwd_bf16(bf16* out, const bf16* x, long long n) {
	GRID_LOOP(i, n) {
		float v = f32(x[i]);
		float e = expf(-2.0f * GELU_K * (v + GELU_C * v * v * v));
		out[i] = round_bf16(v / (1.0f + e));
	}
}

extern "C" __global__ void gelu_bwd_bf16(bf16* dx, const bf16* dy, const bf16* x, long long n) {
	GRID_LOOP(i, n) {
		float v = f32(x[i]);
		float e = expf(-2.0f * GELU_K * (v + GELU_C * v * v * v));
		float s = 1.0f / (1.0f + e);
		float d = s + v * s * (e * s) * 2.0f * GELU_K * (1.0f + 3.0f * GELU_C * v * v);
		dx[i] = round_bf16(f32(dy[i]) * d);
	}
}
