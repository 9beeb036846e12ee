// Code generated from device/kernels/cuda/bias.cu and prelude.cuh; DO NOT EDIT.

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

// ---- bias.cu ----

// Bias add over rows and its gradient, the column sum. CPU twins: the bias
// epilogue of tensor.LinearInto (out = x + bias, broadcast over rows) and
// the bias gradient tensor.SumTo(dy, cols) computes (db = Σ_rows dy).
//
// bias_grad sums each column in a fixed order (a 32 × 8 thread tile walks
// the rows in strides of 8, then the 8 partial sums are added in order),
// so results are the same run to run; the sum is fp32 and db is fp32 for
// both storage types (the bias's master copy is fp32). With accumulate != 0
// the sum is added to db instead of written over it.

#define BIAS_TX 32
#define BIAS_TY 8

extern "C" __global__ void bias_add_f32(float* out, const float* x, const float* bias, int rows, int cols) {
	long long n = (long long)rows * cols;
	GRID_LOOP(i, n) { out[i] = round_f32(__fadd_rn(f32(x[i]), f32(bias[i % cols]))); }
}

extern "C" __global__ void bias_grad_f32(float* db, const float* dy, int rows, int cols, int accumulate) {
	__shared__ float part[BIAS_TY][BIAS_TX];
	int c = blockIdx.x * BIAS_TX + threadIdx.x;
	float s = 0.0f;
	if (c < cols)
		for (int r = threadIdx.y; r < rows; r += BIAS_TY)
			s += f32(dy[(long long)r * cols + c]);
	part[threadIdx.y][threadIdx.x] = s;
	__syncthreads();
	if (threadIdx.y == 0 && c < cols) {
		float t = 0.0f;
		for (int k = 0; k < BIAS_TY; k++)
			t += part[k][threadIdx.x];
		db[c] = accumulate ? db[c] + t : t;
	}
}

extern "C" __global__ void bias_add_bf16(bf16* out, const bf16* x, const bf16* bias, int rows, int cols) {
	long long n = (long long)rows * cols;
	GRID_LOOP(i, n) { out[i] = round_bf16(__fadd_rn(f32(x[i]), f32(bias[i % cols]))); }
}

extern "C" __global__ void bias_grad_bf16(float* db, const bf16* dy, int rows, int cols, int accumulate) {
	__shared__ float part[BIAS_TY][BIAS_TX];
	int c = blockIdx.x * BIAS_TX + threadIdx.x;
	float s = 0.0f;
	if (c < cols)
		for (int r = threadIdx.y; r < rows; r += BIAS_TY)
			s += f32(dy[(long long)r * cols + c]);
	part[threadIdx.y][threadIdx.x] = s;
	__syncthreads();
	if (threadIdx.y == 0 && c < cols) {
		float t = 0.0f;
		for (int k = 0; k < BIAS_TY; k++)
			t += part[k][threadIdx.x];
		db[c] = accumulate ? db[c] + t : t;
	}
}
