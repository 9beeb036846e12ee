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

// cohort:dtypes
extern "C" __global__ void adam_step_X(float* param, const floatX* grad, float* m, float* v, float* vmax,
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

extern "C" __global__ void sgd_step_X(float* param, const floatX* grad, float* buf, long long n, float sign,
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

extern "C" __global__ void grad_clip_X(floatX* grad, long long n, const float* sumsq, float max_norm) {
	double coef = (double)max_norm / (sqrt((double)sumsq[0]) + 1e-6);
	if (!(coef < 1.0))
		return;
	float c = (float)coef;
	GRID_LOOP(i, n) { grad[i] = round_X(__fmul_rn(f32(grad[i]), c)); }
}
// cohort:end
