// Code generated from device/kernels/cuda/conv.cu and prelude.cuh; DO NOT EDIT.

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

// ---- conv.cu ----

// im2col and col2im for conv2d as a GEMM, with the CPU's layout: samples
// [n0, n0 + nb) of x [N, C, H, W] unfold to col [C·KH·KW, nb·OH·OW], row
// (c·KH + ki)·KW + kj, column n·OH·OW + oh·OW + ow, holding
// x[n0 + n, c, oh·stride − pad + ki, ow·stride − pad + kj] (0 outside the
// input). CPU twins: tensor's im2colInto and col2imAdd (conv_im2col.go).
//
// col2im is written as a gather, one thread per input element adding the
// columns that read it in (ki, kj) order onto dx: no atomics, and the
// CPU's order of additions, so the result is the CPU's to the bit.

extern "C" __global__ void im2col_f32(float* col, const float* x, int n0, int nb, int C, int H, int W, int KH, int KW,
                                    int stride, int pad, int OH, int OW) {
	long long L = (long long)OH * OW, cols = nb * L;
	long long total = (long long)C * KH * KW * cols;
	GRID_LOOP(e, total) {
		long long r = e / cols, k = e % cols;
		int n = k / L, l = k % L, oh = l / OW, ow = l % OW;
		int kj = r % KW, ki = (r / KW) % KH, c = r / (KW * KH);
		int ih = oh * stride - pad + ki, iw = ow * stride - pad + kj;
		bool in = ih >= 0 && ih < H && iw >= 0 && iw < W;
		col[e] = in ? x[(((long long)(n0 + n) * C + c) * H + ih) * W + iw] : round_f32(0.0f);
	}
}

extern "C" __global__ void col2im_f32(float* dx, const float* col, int n0, int nb, int C, int H, int W, int KH,
                                    int KW, int stride, int pad, int OH, int OW) {
	long long L = (long long)OH * OW, cols = nb * L;
	long long total = (long long)nb * C * H * W;
	GRID_LOOP(e, total) {
		int iw = e % W, ih = (e / W) % H, c = (e / ((long long)W * H)) % C;
		int n = e / ((long long)W * H * C);
		long long at = (long long)n0 * C * H * W + e;
		float acc = f32(dx[at]);
		for (int ki = 0; ki < KH; ki++) {
			int t = ih + pad - ki;
			if (t < 0 || t % stride != 0 || t / stride >= OH)
				continue;
			int oh = t / stride;
			for (int kj = 0; kj < KW; kj++) {
				int u = iw + pad - kj;
				if (u < 0 || u % stride != 0 || u / stride >= OW)
					continue;
				int ow = u / stride;
				long long r = ((long long)c * KH + ki) * KW + kj;
				acc = __fadd_rn(acc, f32(col[r * cols + n * L + (long long)oh * OW + ow]));
			}
		}
		dx[at] = round_f32(acc);
	}
}

extern "C" __global__ void im2col_bf16(bf16* col, const bf16* x, int n0, int nb, int C, int H, int W, int KH, int KW,
                                    int stride, int pad, int OH, int OW) {
	long long L = (long long)OH * OW, cols = nb * L;
	long long total = (long long)C * KH * KW * cols;
	GRID_LOOP(e, total) {
		long long r = e / cols, k = e % cols;
		int n = k / L, l = k % L, oh = l / OW, ow = l % OW;
		int kj = r % KW, ki = (r / KW) % KH, c = r / (KW * KH);
		int ih = oh * stride - pad + ki, iw = ow * stride - pad + kj;
		bool in = ih >= 0 && ih < H && iw >= 0 && iw < W;
		col[e] = in ? x[(((long long)(n0 + n) * C + c) * H + ih) * W + iw] : round_bf16(0.0f);
	}
}

extern "C" __global__ void col2im_bf16(bf16* dx, const bf16* col, int n0, int nb, int C, int H, int W, int KH,
                                    int KW, int stride, int pad, int OH, int OW) {
	long long L = (long long)OH * OW, cols = nb * L;
	long long total = (long long)nb * C * H * W;
	GRID_LOOP(e, total) {
		int iw = e % W, ih = (e / W) % H, c = (e / ((long long)W * H)) % C;
		int n = e / ((long long)W * H * C);
		long long at = (long long)n0 * C * H * W + e;
		float acc = f32(dx[at]);
		for (int ki = 0; ki < KH; ki++) {
			int t = ih + pad - ki;
			if (t < 0 || t % stride != 0 || t / stride >= OH)
				continue;
			int oh = t / stride;
			for (int kj = 0; kj < KW; kj++) {
				int u = iw + pad - kj;
				if (u < 0 || u % stride != 0 || u / stride >= OW)
					continue;
				int ow = u / stride;
				long long r = ((long long)c * KH + ki) * KW + kj;
				acc = __fadd_rn(acc, f32(col[r * cols + n * L + (long long)oh * OW + ow]));
			}
		}
		dx[at] = round_bf16(acc);
	}
}
