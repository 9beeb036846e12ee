// Sums in fp32: of elements (reduce_sum_partial; CPU twin tensor.Sum) and
// of squares (reduce_sumsq_partial; the 2-norm of optim.ClipGradNorm). Two
// stages, so the order of additions depends only on n: each block of the
// first writes its sum to partial[blockIdx.x] (the caller may offset
// partial to gather several tensors' blocks in one array, as global-norm
// clipping does over all gradients), and reduce_final adds the parts
// parts in one block. Results are the same run to run.

#define REDUCE_THREADS 256

// cohort:dtypes
extern "C" __global__ void reduce_sum_partial_X(float* partial, const floatX* x, long long n) {
	float s = 0.0f;
	GRID_LOOP(i, n) { s += f32(x[i]); }
	s = block_sum(s);
	if (threadIdx.x == 0)
		partial[blockIdx.x] = s;
}

extern "C" __global__ void reduce_sumsq_partial_X(float* partial, const floatX* x, long long n) {
	float s = 0.0f;
	GRID_LOOP(i, n) {
		float v = f32(x[i]);
		s += v * v;
	}
	s = block_sum(s);
	if (threadIdx.x == 0)
		partial[blockIdx.x] = s;
}
// cohort:end

// reduce_final writes (or with accumulate != 0 adds) Σ partial[0:parts]
// into out[0]; one block.
extern "C" __global__ void reduce_final(float* out, const float* partial, int parts, int accumulate) {
	float s = 0.0f;
	for (int i = threadIdx.x; i < parts; i += blockDim.x)
		s += partial[i];
	s = block_sum(s);
	if (threadIdx.x == 0)
		out[0] = accumulate ? out[0] + s : s;
}
