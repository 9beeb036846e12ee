// Row-wise softmax over the last dimension, in fp32 as autocast runs it.
// CPU twins: tensor.Softmax(x, -1) (y = e^(x − max) / Σ e^(x − max)) and
// tensor.SoftmaxBackward (dx = y·(dy − Σ dy·y)). One block of
// SOFTMAX_THREADS per row; a row of −Inf gives NaN, as on the CPU.

#define SOFTMAX_THREADS 256

extern "C" __global__ void softmax_fwd(float* y, const float* x, int rows, int cols) {
	const float* xr = x + (long long)blockIdx.x * cols;
	float* yr = y + (long long)blockIdx.x * cols;
	float m = -INFINITY;
	for (int j = threadIdx.x; j < cols; j += blockDim.x)
		m = fmaxf(m, xr[j]);
	m = block_max(m);
	float s = 0.0f;
	for (int j = threadIdx.x; j < cols; j += blockDim.x)
		s += expf(xr[j] - m);
	float inv = 1.0f / block_sum(s);
	for (int j = threadIdx.x; j < cols; j += blockDim.x)
		yr[j] = expf(xr[j] - m) * inv;
}

extern "C" __global__ void softmax_bwd(float* dx, const float* y, const float* dy, int rows, int cols) {
	long long o = (long long)blockIdx.x * cols;
	float s = 0.0f;
	for (int j = threadIdx.x; j < cols; j += blockDim.x)
		s += dy[o + j] * y[o + j];
	s = block_sum(s);
	for (int j = threadIdx.x; j < cols; j += blockDim.x)
		dx[o + j] = y[o + j] * (dy[o + j] - s);
}
