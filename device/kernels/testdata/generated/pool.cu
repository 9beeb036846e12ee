// Code generated from device/kernels/cuda/pool.cu and prelude.cuh; DO NOT EDIT.

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

// ---- pool.cu ----

// 2-D pooling over planes = N·C planes of H × W, square windows of k with
// equal stride s and zero padding p on both axes (floor mode), fp32. CPU
// twins: tensor.MaxPool2d / MaxPool2dBackward (the first maximum in
// row-major window order, padding counting as −∞; argmax is the index
// h·W + w within the plane) and tensor.AvgPool2d / AvgPool2dBackward
// (padding counted in the mean: count_include_pad).
//
// The backward passes gather: one thread per input element adds the
// outputs whose windows cover it, in output order (the CPU's order of
// additions for max pooling), so there are no atomics.

extern "C" __global__ void maxpool_fwd(float* y, int* argmax, const float* x, int planes, int H, int W, int OH, int OW,
                                       int k, int s, int p) {
	long long n = (long long)planes * OH * OW;
	GRID_LOOP(e, n) {
		int ow = e % OW, oh = (e / OW) % OH;
		long long pl = e / ((long long)OW * OH);
		const float* xp = x + pl * H * W;
		float best = -INFINITY;
		int at = -1;
		for (int ki = 0; ki < k; ki++) {
			int ih = oh * s - p + ki;
			if (ih < 0 || ih >= H)
				continue;
			for (int kj = 0; kj < k; kj++) {
				int iw = ow * s - p + kj;
				if (iw < 0 || iw >= W)
					continue;
				float v = xp[ih * W + iw];
				if (at < 0 || v > best || (v != v && best == best)) {
					best = v;
					at = ih * W + iw;
				}
			}
		}
		y[e] = best;
		argmax[e] = at;
	}
}

extern "C" __global__ void maxpool_bwd(float* dx, const float* dy, const int* argmax, int planes, int H, int W, int OH,
                                       int OW, int k, int s, int p) {
	long long n = (long long)planes * H * W;
	GRID_LOOP(e, n) {
		int idx = e % ((long long)H * W), iw = idx % W, ih = idx / W;
		long long pl = e / ((long long)H * W);
		float acc = 0.0f;
		int oh0 = max(0, (ih + p - k + s) / s), oh1 = min(OH - 1, (ih + p) / s);
		int ow0 = max(0, (iw + p - k + s) / s), ow1 = min(OW - 1, (iw + p) / s);
		for (int oh = oh0; oh <= oh1; oh++)
			for (int ow = ow0; ow <= ow1; ow++) {
				long long o = (pl * OH + oh) * OW + ow;
				if (argmax[o] == idx)
					acc = __fadd_rn(acc, dy[o]);
			}
		dx[e] = acc;
	}
}

extern "C" __global__ void avgpool_fwd(float* y, const float* x, int planes, int H, int W, int OH, int OW, int k, int s,
                                       int p) {
	long long n = (long long)planes * OH * OW;
	GRID_LOOP(e, n) {
		int ow = e % OW, oh = (e / OW) % OH;
		const float* xp = x + e / ((long long)OW * OH) * H * W;
		float sum = 0.0f;
		for (int ki = 0; ki < k; ki++) {
			int ih = oh * s - p + ki;
			if (ih < 0 || ih >= H)
				continue;
			for (int kj = 0; kj < k; kj++) {
				int iw = ow * s - p + kj;
				if (iw >= 0 && iw < W)
					sum += xp[ih * W + iw];
			}
		}
		y[e] = sum / (float)(k * k);
	}
}

extern "C" __global__ void avgpool_bwd(float* dx, const float* dy, int planes, int H, int W, int OH, int OW, int k,
                                       int s, int p) {
	long long n = (long long)planes * H * W;
	GRID_LOOP(e, n) {
		int iw = e % W, ih = (e / W) % H;
		long long pl = e / ((long long)H * W);
		float acc = 0.0f;
		int oh0 = max(0, (ih + p - k + s) / s), oh1 = min(OH - 1, (ih + p) / s);
		int ow0 = max(0, (iw + p - k + s) / s), ow1 = min(OW - 1, (iw + p) / s);
		for (int oh = oh0; oh <= oh1; oh++)
			for (int ow = ow0; ow <= ow1; ow++)
				acc += dy[(pl * OH + oh) * OW + ow];
		dx[e] = acc / (float)(k * k);
	}
}
