// Code generated from device/kernels/cuda/embedding.cu and prelude.cuh; DO NOT EDIT.

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

// ---- embedding.cu ----

// Token + position embedding and its gradients, fp32. CPU twin: GPT's
// embedding, out[b, t] = wte[idx[b, t]] + wpe[t] (tensor.IndexRows and an
// add), whose backward adds each position's gradient into its token's row
// (tensor.IndexAddRows) and sums the positions over the batch.
//
// The scatter-add is made deterministic without atomics: the caller, who
// holds the token ids on the host, sorts the positions by token id (a
// stable counting sort) and passes them as order, with seg_start[g] ..
// seg_start[g+1] the positions of the g-th distinct id seg_id[g]. One
// block per id adds its positions' rows in position order, which is also
// the order in which IndexAddRows adds them, so the result is the CPU's to
// the bit.

extern "C" __global__ void embedding_fwd(float* out, const long long* idx, const float* wte, const float* wpe, int B,
                                         int T, int D) {
	long long n = (long long)B * T * D;
	GRID_LOOP(e, n) {
		long long bt = e / D;
		int c = e % D, t = bt % T;
		out[e] = __fadd_rn(wte[idx[bt] * D + c], wpe[(long long)t * D + c]);
	}
}

// embedding_bwd_wpe adds Σ_b dout[b, t] into dwpe[t].
extern "C" __global__ void embedding_bwd_wpe(float* dwpe, const float* dout, int B, int T, int D) {
	long long n = (long long)T * D;
	GRID_LOOP(e, n) {
		float s = dwpe[e];
		for (int b = 0; b < B; b++)
			s += dout[(long long)b * T * D + e];
		dwpe[e] = s;
	}
}

// embedding_bwd_wte adds each distinct token's positions' rows of dout into
// its row of dwte; one block per distinct token, threads over D.
extern "C" __global__ void embedding_bwd_wte(float* dwte, const float* dout, const int* order, const int* seg_start,
                                             const int* seg_id, int nseg, int D) {
	int g = blockIdx.x;
	if (g >= nseg)
		return;
	float* row = dwte + (long long)seg_id[g] * D;
	for (int c = threadIdx.x; c < D; c += blockDim.x) {
		float s = row[c];
		for (int k = seg_start[g]; k < seg_start[g + 1]; k++)
			s += dout[(long long)order[k] * D + c];
		row[c] = s;
	}
}
