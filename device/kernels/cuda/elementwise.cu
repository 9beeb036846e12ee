// Elementwise ops on contiguous operands of n elements (broadcasting is
// resolved by the caller). CPU twins: tensor.AddInto, SubInto, MulInto
// (add, sub, mul), tensor.ScaleInto (scale), tensor.AddScaled (axpy:
// y += alpha·x), Tensor.Fill (fill), tensor.ReLUInto (relu_fwd) and
// tensor.ReLUBackwardInto (relu_bwd: dy where y > 0, 0 where y = 0, dy
// where y is NaN). One rounded fp32 operation per result, as on the CPU;
// out may alias an input.

// cohort:dtypes
extern "C" __global__ void add_X(floatX* out, const floatX* a, const floatX* b, long long n) {
	GRID_LOOP(i, n) { out[i] = round_X(__fadd_rn(f32(a[i]), f32(b[i]))); }
}

extern "C" __global__ void sub_X(floatX* out, const floatX* a, const floatX* b, long long n) {
	GRID_LOOP(i, n) { out[i] = round_X(__fsub_rn(f32(a[i]), f32(b[i]))); }
}

extern "C" __global__ void mul_X(floatX* out, const floatX* a, const floatX* b, long long n) {
	GRID_LOOP(i, n) { out[i] = round_X(__fmul_rn(f32(a[i]), f32(b[i]))); }
}

extern "C" __global__ void scale_X(floatX* out, const floatX* x, float alpha, long long n) {
	GRID_LOOP(i, n) { out[i] = round_X(__fmul_rn(alpha, f32(x[i]))); }
}

// axpy_X rounds the product before the sum, as tensor.AddScaled does
// (built for GOAMD64 v1 or v2; at v3 Go may fuse its a + alpha·b into an
// FMA).
extern "C" __global__ void axpy_X(floatX* y, float alpha, const floatX* x, long long n) {
	GRID_LOOP(i, n) { y[i] = round_X(__fadd_rn(f32(y[i]), __fmul_rn(alpha, f32(x[i])))); }
}

extern "C" __global__ void fill_X(floatX* out, float v, long long n) {
	floatX r = round_X(v);
	GRID_LOOP(i, n) { out[i] = r; }
}

extern "C" __global__ void relu_fwd_X(floatX* out, const floatX* x, long long n) {
	GRID_LOOP(i, n) {
		float v = f32(x[i]);
		out[i] = round_X(v > 0.0f || v != v ? v : 0.0f); // NaN passes, as max(x, 0) in PyTorch
	}
}

extern "C" __global__ void relu_bwd_X(floatX* dx, const floatX* dy, const floatX* y, long long n) {
	GRID_LOOP(i, n) {
		float v = f32(y[i]);
		dx[i] = v > 0.0f || v != v ? dy[i] : round_X(0.0f);
	}
}
// cohort:end
