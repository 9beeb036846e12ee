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

// cohort:dtypes
extern "C" __global__ void bias_add_X(floatX* out, const floatX* x, const floatX* bias, int rows, int cols) {
	long long n = (long long)rows * cols;
	GRID_LOOP(i, n) { out[i] = round_X(__fadd_rn(f32(x[i]), f32(bias[i % cols]))); }
}

extern "C" __global__ void bias_grad_X(float* db, const floatX* dy, int rows, int cols, int accumulate) {
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
// cohort:end
