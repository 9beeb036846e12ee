// The fused classifier: softmax over the vocabulary, cross-entropy loss
// and its gradient in one kernel, one block per row, with the logits
// overwritten by dlogits (as llm.c's fused_classifier). CPU twin:
// autograd.CrossEntropy on [rows, V] with ReduceMean (and IgnoreIndex when
// set): loss_r = lse_r − x[r, target_r] with lse_r = m + log Σ e^(x − m),
// and dlogits = (softmax − onehot(target))·dscale, where the caller passes
// dscale = upstream gradient / (number of rows not ignored). A row whose
// target is ignore_index gets loss 0 and dlogits 0. losses holds the
// per-row losses in fp32; their sum (reduce_sum) times dscale is the mean.
// Targets must be in [0, V) or ignore_index: the caller checks them on the
// host, where they come from, as the CPU op does. Label smoothing is not
// implemented here. Math is fp32 for both storage
// types of the logits.

#define CLS_THREADS 512

// cohort:dtypes
extern "C" __global__ void fused_classifier_X(floatX* logits, float* losses, const long long* targets, int rows,
                                              int V, float dscale, long long ignore_index) {
	long long o = (long long)blockIdx.x * V;
	long long target = targets[blockIdx.x];
	bool ignored = target == ignore_index;
	// One pass for each thread's maximum and its sum of e^(x − max).
	float m = -INFINITY, s = 0.0f;
	for (int j = threadIdx.x; j < V; j += blockDim.x) {
		float x = f32(logits[o + j]);
		if (x > m) {
			s = s * expf(m - x) + 1.0f;
			m = x;
		} else {
			s += expf(x - m);
		}
	}
	float M = block_max(m);
	float S = block_sum(m == -INFINITY ? 0.0f : s * expf(m - M));
	float lse = M + logf(S);
	// Read by thread 0 before any thread writes (the block reductions above
	// end in barriers after which the writes start).
	if (threadIdx.x == 0)
		losses[blockIdx.x] = ignored ? 0.0f : lse - f32(logits[o + target]);
	__syncthreads();
	for (int j = threadIdx.x; j < V; j += blockDim.x) {
		float p = expf(f32(logits[o + j]) - lse);
		float g = ignored ? 0.0f : (p - (j == target ? 1.0f : 0.0f)) * dscale;
		logits[o + j] = round_X(g);
	}
}
// cohort:end
