// Code generated from device/kernels/cuda/elementwise.cu and prelude.cuh; DO NOT EDIT.

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

// ---- elementwise.cu ----

// Elementwise ops on contiguous operands of n elements (broadcasting is
// resolved by the caller). CPU twins: tensor.AddInto, SubInto, MulInto
// (add, sub, mul), tensor.ScaleInto (scale), tensor.AddScaled (axpy:
// y += alpha·x), Tensor.Fill (fill), tensor.ReLUInto (relu_fwd) and
// tensor.ReLUBackwardInto (relu_bwd: dy where y > 0, 0 where y = 0, dy
// where y is NaN). One rounded fp32 operation per result, as on the CPU;
// out may alias an input.

extern "C" __global__ void add_f32(float* out, const float* a, const float* b, long long n) {
	GRID_LOOP(i, n) { out[i] = round_f32(__fadd_rn(f32(a[i]), f32(b[i]))); }
}

extern "C" __global__ void sub_f32(float* out, const float* a, const float* b, long long n) {
	GRID_LOOP(i, n) { out[i] = round_f32(__fsub_rn(f32(a[i]), f32(b[i]))); }
}

extern "C" __global__ void mul_f32(float* out, const float* a, const float* b, long long n) {
	GRID_LOOP(i, n) { out[i] = round_f32(__fmul_rn(f32(a[i]), f32(b[i]))); }
}

extern "C" __global__ void scale_f32(float* out, const float* x, float alpha, long long n) {
	GRID_LOOP(i, n) { out[i] = round_f32(__fmul_rn(alpha, f32(x[i]))); }
}

// axpy_f32 rounds the product before the sum, as tensor.AddScaled does
// (built for GOAMD64 v1 or v2; at v3 Go may fuse its a + alpha·b into an
// FMA).
extern "C" __global__ void axpy_f32(float* y, float alpha, const float* x, long long n) {
	GRID_LOOP(i, n) { y[i] = round_f32(__fadd_rn(f32(y[i]), __fmul_rn(alpha, f32(x[i])))); }
}

extern "C" __global__ void fill_f32(float* out, float v, long long n) {
	float r = round_f32(v);
	GRID_LOOP(i, n) { out[i] = r; }
}

extern "C" __global__ void relu_fwd_f32(float* out, const float* x, long long n) {
	GRID_LOOP(i, n) {
		float v = f32(x[i]);
		out[i] = round_f32(v > 0.0f || v != v ? v : 0.0f); // NaN passes, as max(x, 0) in PyTorch
	}
}

extern "C" __global__ void relu_bwd_f32(float* dx, const float* dy, const float* y, long long n) {
	GRID_LOOP(i, n) {
		float v = f32(y[i]);
		dx[i] = v > 0.0f || v != v ? dy[i] : round_f32(0.0f);
	}
}

extern "C" __global__ void add_bf16(bf16* out, const bf16* a, const bf16* b, long long n) {
	GRID_LOOP(i, n) { out[i] = round_bf16(__fadd_rn(f32(a[i]), f32(b[i]))); }
}

extern "C" __global__ void sub_bf16(bf16* out, const bf16* a, const bf16* b, long long n) {
	GRID_LOOP(i, n) { out[i] = round_bf16(__fsub_rn(f32(a[i]), f32(b[i]))); }
}

extern "C" __global__ void mul_bf16(bf16* out, const bf16* a, const bf16* b, long long n) {
	GRID_LOOP(i, n) { out[i] = round_bf16(__fmul_rn(f32(a[i]), f32(b[i]))); }
}

extern "C" __global__ void scale_bf16(bf16* out, const bf16* x, float alpha, long long n) {
	GRID_LOOP(i, n) { out[i] = round_bf16(__fmul_rn(alpha, f32(x[i]))); }
}

// axpy_bf16 rounds the product before the sum, as tensor.AddScaled does
// (built for GOAMD64 v1 or v2; at v3 Go may fuse its a + alpha·b into an
// FMA).
extern "C" __global__ void axpy_bf16(bf16* y, float alpha, const bf16* x, long long n) {
	GRID_LOOP(i, n) { y[i] = round_bf16(__fadd_rn(f32(y[i]), __fmul_rn(alpha, f32(x[i])))); }
}

extern "C" __global__ void fill_bf16(bf16* out, float v, long long n) {
	bf16 r = round_bf16(v);
	GRID_LOOP(i, n) { out[i] = r; }
}

extern "C" __global__ void relu_fwd_bf16(bf16* out, const bf16* x, long long n) {
	GRID_LOOP(i, n) {
		float v = f32(x[i]);
		out[i] = round_bf16(v > 0.0f || v != v ? v : 0.0f); // NaN passes, as max(x, 0) in PyTorch
	}
}

extern "C" __global__ void relu_bwd_bf16(bf16* dx, const bf16* dy, const bf16* y, long long n) {
	GRID_LOOP(i, n) {
		float v = f32(y[i]);
		dx[i] = v > 0.0f || v != v ? dy[i] : round_bf16(0.0f);
	}
}
