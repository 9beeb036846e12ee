// Token + position embedding and its gradients, fp32. CPU twin: GPT's
// embedding, out[b, t] = wte[idx[b, t]] + wpe[t] (tensor.IndexRows and an
// add), whose backward adds each position's gradient into its token's row
// (tensor.IndexAddRows) and sums the positions over the batch.
//
// The scatter-add is made deterministic without atomics: the caller, who
// holds the token ids on the host, sorts the positions by token id (a
// stable counting sort) and passes them as order, with seg_start[g] ..
// seg_start[g+1] the positions of the g-th distinct id seg_id[g]. One
// block per id adds its positions' rows in position order, which is also
// the order in which IndexAddRows adds them, so the result is the CPU's to
// the bit.

extern "C" __global__ void embedding_fwd(float* out, const long long* idx, const float* wte, const float* wpe, int B,
                                         int T, int D) {
	long long n = (long long)B * T * D;
	GRID_LOOP(e, n) {
		long long bt = e / D;
		int c = e % D, t = bt % T;
		out[e] = __fadd_rn(wte[idx[bt] * D + c], wpe[(long long)t * D + c]);
	}
}

// embedding_bwd_wpe adds Σ_b dout[b, t] into dwpe[t].
extern "C" __global__ void embedding_bwd_wpe(float* dwpe, const float* dout, int B, int T, int D) {
	long long n = (long long)T * D;
	GRID_LOOP(e, n) {
		float s = dwpe[e];
		for (int b = 0; b < B; b++)
			s += dout[(long long)b * T * D + e];
		dwpe[e] = s;
	}
}

// embedding_bwd_wte adds each distinct token's positions' rows of dout into
// its row of dwte; one block per distinct token, threads over D.
extern "C" __global__ void embedding_bwd_wte(float* dwte, const float* dout, const int* order, const int* seg_start,
                                             const int* seg_id, int nseg, int D) {
	int g = blockIdx.x;
	if (g >= nseg)
		return;
	float* row = dwte + (long long)seg_id[g] * D;
	for (int c = threadIdx.x; c < D; c += blockDim.x) {
		float s = row[c];
		for (int k = seg_start[g]; k < seg_start[g + 1]; k++)
			s += dout[(long long)order[k] * D + c];
		row[c] = s;
	}
}
