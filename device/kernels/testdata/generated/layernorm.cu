// Code generated from device/kernels/cuda/layernorm.cu and prelude.cuh; DO NOT EDIT.

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

// ---- layernorm.cu ----

// LayerNorm over the last dimension (D) of rows, in fp32 as autocast runs
// it. CPU twins: tensor.LayerNorm (y = (x − mean)·rstd·w + b, biased
// variance, rstd = 1/√(var + eps), eps 1e-5 from nn.LayerNorm; mean and
// rstd saved per row) and tensor.LayerNormBackward / LayerNormBackwardAdd
// (dx = rstd·(ĝ − mean(ĝ) − x̂·mean(ĝ·x̂)) with ĝ = dy·w; dw = Σ dy·x̂,
// db = Σ dy over rows).
//
// One warp per row; the variance is summed from centred values (two
// passes over the row, which stays in L1/L2), as the CPU does. The
// backward pass writes each block's partial dw and db sums to a scratch
// [gridDim.x, D] pair that layernorm_bwd_reduce adds in block order, so dw
// and db do not depend on timing. The backward pass keeps 2·LN_BWD_WARPS·D
// floats of shared memory: D up to 1536 within the default 48 KiB.

#define LN_WARPS 8     // rows per block, forward
#define LN_BWD_WARPS 4 // rows in flight per block, backward

extern "C" __global__ void layernorm_fwd(float* y, float* mean, float* rstd, const float* x, const float* w,
                                         const float* b, int rows, int D, float eps) {
	int lane = threadIdx.x & 31;
	int row = blockIdx.x * LN_WARPS + (threadIdx.x >> 5);
	if (row >= rows)
		return;
	const float* xr = x + (long long)row * D;
	float s = 0.0f;
	for (int j = lane; j < D; j += 32)
		s += xr[j];
	float m = warp_sum(s) / D;
	float ss = 0.0f;
	for (int j = lane; j < D; j += 32) {
		float d = xr[j] - m;
		ss += d * d;
	}
	float rs = rsqrtf(warp_sum(ss) / D + eps);
	float* yr = y + (long long)row * D;
	for (int j = lane; j < D; j += 32)
		yr[j] = (xr[j] - m) * rs * w[j] + b[j];
	if (lane == 0) {
		mean[row] = m;
		rstd[row] = rs;
	}
}

// layernorm_bwd: dx (added into dx when accumulate != 0, as
// LayerNormBackwardAdd adds into the residual stream's gradient), and this
// block's partial sums of dw and db into dwp and dbp [gridDim.x, D]. Each
// block walks rows blockIdx.x·LN_BWD_WARPS + warp, stepping by
// gridDim.x·LN_BWD_WARPS; its warps' partials meet in shared memory
// (2·LN_BWD_WARPS·D floats, dynamic) in warp order.
extern "C" __global__ void layernorm_bwd(float* dx, float* dwp, float* dbp, const float* dy, const float* x,
                                         const float* w, const float* mean, const float* rstd, int rows, int D,
                                         int accumulate) {
	extern __shared__ float acc[]; // [LN_BWD_WARPS][2][D]
	int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	float* dwa = acc + warp * 2 * D;
	float* dba = dwa + D;
	for (int j = lane; j < D; j += 32)
		dwa[j] = dba[j] = 0.0f;
	for (int row = blockIdx.x * LN_BWD_WARPS + warp; row < rows; row += gridDim.x * LN_BWD_WARPS) {
		const float* xr = x + (long long)row * D;
		const float* gr = dy + (long long)row * D;
		float m = mean[row], rs = rstd[row];
		float s1 = 0.0f, s2 = 0.0f;
		for (int j = lane; j < D; j += 32) {
			float xh = (xr[j] - m) * rs;
			float g = gr[j];
			dwa[j] += g * xh;
			dba[j] += g;
			float dh = g * w[j];
			s1 += dh;
			s2 += dh * xh;
		}
		s1 = warp_sum(s1) / D;
		s2 = warp_sum(s2) / D;
		float* dxr = dx + (long long)row * D;
		for (int j = lane; j < D; j += 32) {
			float xh = (xr[j] - m) * rs;
			float v = rs * (gr[j] * w[j] - s1 - xh * s2);
			dxr[j] = accumulate ? dxr[j] + v : v;
		}
	}
	__syncthreads();
	for (int j = threadIdx.x; j < D; j += blockDim.x) {
		float sw = 0.0f, sb = 0.0f;
		for (int k = 0; k < LN_BWD_WARPS; k++) {
			sw += acc[k * 2 * D + j];
			sb += acc[k * 2 * D + D + j];
		}
		dwp[(long long)blockIdx.x * D + j] = sw;
		dbp[(long long)blockIdx.x * D + j] = sb;
	}
}

// layernorm_bwd_reduce adds the parts partial rows of dwp and dbp, in
// order, into dw and db (accumulating: parameter gradients add up).
extern "C" __global__ void layernorm_bwd_reduce(float* dw, float* db, const float* dwp, const float* dbp, int parts,
                                                int D) {
	int j = blockIdx.x * blockDim.x + threadIdx.x;
	if (j >= D)
		return;
	float sw = 0.0f, sb = 0.0f;
	for (int k = 0; k < parts; k++) {
		sw += dwp[(long long)k * D + j];
		sb += dbp[(long long)k * D + j];
	}
	dw[j] += sw;
	db[j] += sb;
}
