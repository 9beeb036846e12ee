// strided_copy_f32 copies a strided view of up to four dimensions (sizes
// d0..d3; source strides t0..t3 in elements, 0 for a broadcast dimension)
// into another view of the same shape (destination strides u0..u3, no
// two elements at one address): the device form of tensor's Contiguous
// and of CopyFrom between views. Bit-exact (a copy).

#define GRID_LOOP(i, n) \
	for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (long long)gridDim.x * blockDim.x)

extern "C" __global__ void strided_copy_f32(float* out, const float* x, long long n, int d0, int d1, int d2, int d3,
                                            long long t0, long long t1, long long t2, long long t3, long long u0,
                                            long long u1, long long u2, long long u3) {
	GRID_LOOP(e, n) {
		long long r = e;
		long long i3 = r % d3;
		r /= d3;
		long long i2 = r % d2;
		r /= d2;
		long long i1 = r % d1;
		long long i0 = r / d1;
		out[i0 * u0 + i1 * u1 + i2 * u2 + i3 * u3] = x[i0 * t0 + i1 * t1 + i2 * t2 + i3 * t3];
	}
}

// unary_f32 and binary_f32 are the elementwise ops that device/kernels
// has no kernel for, selected by op (the codes of ew.go). They compute in
// double where the CPU twin (tensor.ApplyUnary) does and round once, so
// they match it to float32 rounding.
#define U_EXP 1
#define U_LOG 2
#define U_SQRT 3
#define U_TANH 4
#define U_SIGMOID 5
#define U_ABS 6
#define U_GELU 7
#define U_SILU 8
#define U_SQUARE 9
#define U_ADD_SCALAR 10
#define U_POW 11

__device__ __forceinline__ double sigmoid64(double v) { return 1.0 / (1.0 + exp(-v)); }

extern "C" __global__ void unary_f32(float* out, const float* x, long long n, int op, float c) {
	GRID_LOOP(i, n) {
		float v = x[i];
		double w = (double)v;
		float r;
		switch (op) {
		case U_EXP: r = (float)exp(w); break;
		case U_LOG: r = (float)log(w); break;
		case U_SQRT: r = (float)sqrt(w); break;
		case U_TANH: r = (float)tanh(w); break;
		case U_SIGMOID: r = (float)sigmoid64(w); break;
		case U_ABS: r = fabsf(v); break;
		case U_GELU: r = (float)(0.5 * w * (1.0 + erf(w * 0.70710678118654752440))); break;
		case U_SILU: r = (float)(w * sigmoid64(w)); break;
		case U_SQUARE: r = __fmul_rn(v, v); break;
		case U_ADD_SCALAR: r = __fadd_rn(v, c); break;
		case U_POW: r = (float)pow(w, (double)c); break;
		default: r = __int_as_float(0x7fc00000); break;
		}
		out[i] = r;
	}
}

#define B_DIV 1
#define B_MAX 2
#define B_MIN 3

extern "C" __global__ void binary_f32(float* out, const float* a, const float* b, long long n, int op) {
	GRID_LOOP(i, n) {
		float x = a[i], y = b[i], r;
		if (op == B_DIV) {
			r = __fdiv_rn(x, y);
		} else if (isnan(x) || isnan(y)) {
			r = __int_as_float(0x7fc00000); // Go's max and min propagate NaN
		} else if (op == B_MAX) {
			r = x > y ? x : y;
		} else {
			r = x < y ? x : y;
		}
		out[i] = r;
	}
}
