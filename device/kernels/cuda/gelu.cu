// GELU, tanh form ("gelu_new", GPT-2's): y = ½x·(1 + tanh(u)) with
// u = √(2/π)·(x + 0.044715·x³), computed as x·σ(2u) = x / (1 + e^(−2u)),
// which has no cancellation for negative x. CPU twins: tensor.GELUTanhInto
// (gelu_fwd) and tensor.GELUTanhBackwardInto (gelu_bwd: dy·y′ with
// y′ = σ + x·σ·(e·σ)·2·√(2/π)·(1 + 3·0.044715·x²), σ = σ(2u), e = e^(−2u)).
// The fused linear+GELU epilogue of the CPU (gemm.SgemmEpilogue) computes
// the same function.

#define GELU_K 0.7978845608028654f // √(2/π)
#define GELU_C 0.044715f

// cohort:dtypes
extern "C" __global__ void gelu_fwd_X(floatX* out, const floatX* x, long long n) {
	GRID_LOOP(i, n) {
		float v = f32(x[i]);
		float e = expf(-2.0f * GELU_K * (v + GELU_C * v * v * v));
		out[i] = round_X(v / (1.0f + e));
	}
}

extern "C" __global__ void gelu_bwd_X(floatX* dx, const floatX* dy, const floatX* x, long long n) {
	GRID_LOOP(i, n) {
		float v = f32(x[i]);
		float e = expf(-2.0f * GELU_K * (v + GELU_C * v * v * v));
		float s = 1.0f / (1.0f + e);
		float d = s + v * s * (e * s) * 2.0f * GELU_K * (1.0f + 3.0f * GELU_C * v * v);
		dx[i] = round_X(f32(dy[i]) * d);
	}
}
// cohort:end
