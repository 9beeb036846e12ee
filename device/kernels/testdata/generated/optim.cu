// Code generated from device/kernels/cuda/optim.cu and prelude.cuh; DO NOT EDIT.

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

// ---- optim.cu ----

// Optimizer steps on fp32 master weights, elementwise, with the CPU's
// operation order and rounding (every product and sum rounded on its own
// through the _rn intrinsics, which the compiler never fuses into an FMA),
// so that a step gives the CPU's bits. The scalars are those the CPU
// derives per call from the hyperparameters and the step number.
//
// adam_step: CPU twin optim.AdamUpdate (Adam and AdamW, as PyTorch 1.13):
//
//	g = sign·grad
//	p = decay·param                      decay = 1 − lr·wd (AdamW), else 1
//	g = g + l2·p                         Adam with weight decay (has_l2)
//	m = b1·m + c1·g                      c1 = 1 − β1
//	v = b2·v + (c2·g)·g                  c2 = 1 − β2
//	vmax = max(vmax, v); use vmax        amsgrad
//	param = p + (step_size·m) / (√v / bc2_sqrt + eps)
//
// with step_size = −lr/(1 − β1^t) and bc2_sqrt = √(1 − β2^t).
//
// sgd_step: CPU twin optim.SGDUpdate (torch.optim.SGD): g = sign·grad +
// wd·param; with momentum, buf = g on the first step else
// mom·buf + damp·g (damp = 1 − dampening), and g = g + mom·buf (Nesterov)
// or buf; param = param − lr·g.
//
// grad_clip: the scaling half of optim.ClipGradNorm for the 2-norm: with
// the total sum of squares already on the device (reduce_sumsq_partial and
// reduce_final over every gradient), coef = max_norm / (√sumsq + 1e-6),
// computed in float64 as on the CPU, and each gradient is scaled by
// float32(coef) when coef < 1; no copy to the host in between.

extern "C" __global__ void adam_step_f32(float* param, const float* grad, float* m, float* v, float* vmax,
                                       long long n, float sign, float decay, float l2, float b1, float c1, float b2,
                                       float c2, float bc2_sqrt, float eps, float step_size, int has_l2,
                                       int amsgrad) {
	GRID_LOOP(i, n) {
		float g = __fmul_rn(sign, f32(grad[i]));
		float p = __fmul_rn(param[i], decay);
		if (has_l2)
			g = __fadd_rn(g, __fmul_rn(l2, p));
		float mi = __fadd_rn(__fmul_rn(b1, m[i]), __fmul_rn(c1, g));
		float vi = __fadd_rn(__fmul_rn(b2, v[i]), __fmul_rn(__fmul_rn(c2, g), g));
		m[i] = mi;
		v[i] = vi;
		if (amsgrad) {
			if (vmax[i] > vi)
				vi = vmax[i];
			vmax[i] = vi;
		}
		float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(vi), bc2_sqrt), eps);
		param[i] = __fadd_rn(p, __fdiv_rn(__fmul_rn(step_size, mi), denom));
	}
}

extern "C" __global__ void sgd_step_f32(float* param, const float* grad, float* buf, long long n, float sign,
                                      float wd, float mom, float damp, float lr, int has_wd, int momentum,
                                      int nesterov, int first) {
	GRID_LOOP(i, n) {
		float p = param[i];
		float g = __fmul_rn(sign, f32(grad[i]));
		if (has_wd)
			g = __fadd_rn(g, __fmul_rn(wd, p));
		if (momentum) {
			float b = first ? g : __fadd_rn(__fmul_rn(mom, buf[i]), __fmul_rn(damp, g));
			buf[i] = b;
			g = nesterov ? __fadd_rn(g, __fmul_rn(mom, b)) : b;
		}
		param[i] = __fsub_rn(p, __fmul_rn(lr, g));
	}
}

extern "C" __global__ void grad_clip_f32(float* grad, long long n, const float* sumsq, float max_norm) {
	double coef = (double)max_norm / (sqrt((double)sumsq[0]) + 1e-6);
	if (!(coef < 1.0))
		return;
	float c = (float)coef;
	GRID_LOOP(i, n) { grad[i] = round_f32(__fmul_rn(f32(grad[i]), c)); }
}

extern "C" __global__ void adam_step_bf16(float* param, const bf16* grad, float* m, float* v, float* vmax,
                                       long long n, float sign, float decay, float l2, float b1, float c1, float b2,
                                       float c2, float bc2_sqrt, float eps, float step_size, int has_l2,
                                       int amsgrad) {
	GRID_LOOP(i, n) {
		float g = __fmul_rn(sign, f32(grad[i]));
		float p = __fmul_rn(param[i], decay);
		if (has_l2)
			g = __fadd_rn(g, __fmul_rn(l2, p));
		float mi = __fadd_rn(__fmul_rn(b1, m[i]), __fmul_rn(c1, g));
		float vi = __fadd_rn(__fmul_rn(b2, v[i]), __fmul_rn(__fmul_rn(c2, g), g));
		m[i] = mi;
		v[i] = vi;
		if (amsgrad) {
			if (vmax[i] > vi)
				vi = vmax[i];
			vmax[i] = vi;
		}
		float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(vi), bc2_sqrt), eps);
		param[i] = __fadd_rn(p, __fdiv_rn(__fmul_rn(step_size, mi), denom));
	}
}

extern "C" __global__ void sgd_step_bf16(float* param, const bf16* grad, float* buf, long long n, float sign,
                                      float wd, float mom, float damp, float lr, int has_wd, int momentum,
                                      int nesterov, int first) {
	GRID_LOOP(i, n) {
		float p = param[i];
		float g = __fmul_rn(sign, f32(grad[i]));
		if (has_wd)
			g = __fadd_rn(g, __fmul_rn(wd, p));
		if (momentum) {
			float b = first ? g : __fadd_rn(__fmul_rn(mom, buf[i]), __fmul_rn(damp, g));
			buf[i] = b;
			g = nesterov ? __fadd_rn(g, __fmul_rn(mom, b)) : b;
		}
		param[i] = __fsub_rn(p, __fmul_rn(lr, g));
	}
}

extern "C" __global__ void grad_clip_bf16(bf16* grad, long long n, const float* sumsq, float max_norm) {
	double coef = (double)max_norm / (sqrt((double)sumsq[0]) + 1e-6);
	if (!(coef < 1.0))
		return;
	float c = (float)coef;
	GRID_LOOP(i, n) { grad[i] = round_bf16(__fmul_rn(f32(grad[i]), c)); }
}
