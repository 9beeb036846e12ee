// Fused multi-head attention over a packed qkv [B, T, 3d] (q | k | v along
// the features, head h at features h·hd of each; d = H·hd), writing
// y [B, T, d] and the log-sum-exp of each score row, lse [B, H, T] (fp32),
// for the backward pass. Scores are scale·q·k (scale = 1/√hd), with a
// causal mask when causal != 0. CPU twins: tensor.AttentionQKV and
// tensor.AttentionQKVBackward, which keep the T×T probabilities instead.
//
// Flash-attention style (Dao et al., 2022; FlashAttention-2, 2023): the
// probabilities are never stored. The forward pass runs one warp per query
// row, ATT_WARPS rows per block; the block walks the keys in tiles of 32
// held in shared memory, each lane scoring one key of the tile, and keeps
// the row's running maximum m, sum l and output o (each lane owning the
// features lane, lane + 32, …, so hd ≤ 128 gives ≤ 4 per lane), rescaled by
// e^(m_old − m_new) as the maximum grows (the online softmax).
//
// The backward pass recomputes p = e^(s − lse) tile by tile, in two kernels
// that write disjoint parts of dqkv with no atomics, so the result is the
// same run to run: attention_bwd_dq (one warp per query row: Δ = Σ dy·y,
// stored for the second kernel; ds = p·(dy·v − Δ); dq = scale·Σ_j ds·k_j)
// and then attention_bwd_dkv (one warp per key row: dv = Σ_i p·dy_i,
// dk = scale·Σ_i ds·q_i). Launch them in that order on one stream.
//
// Shared memory is dynamic, in floats: two tiles of 32 × (hd + 1) (the
// padding column spreads a lane's row over the 32 banks) plus the block's
// own rows, ATT_WARPS × hd each (see the Go table). Accumulation is fp32
// for both storage types.

#define ATT_WARPS 8
#define ATT_TILE 32
#define ATT_MAXR 4 // features per lane: hd ≤ 32·ATT_MAXR = 128

// ATT_WARP_ROW declares where a warp of the three kernels works (the
// grid is (⌈T/ATT_WARPS⌉, B·H), blocks of ATT_WARPS warps, as the Go table
// launches them): its lane and warp; the batch b and head h of its block;
// d = H·hd; row0, the block's first row, and row, the warp's own; seq, the
// offset of sequence b in qkv. The kernel's parameters T, H and hd must be
// in scope.
#define ATT_WARP_ROW(row)                                              \
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;    \
	const int b = blockIdx.y / H, h = blockIdx.y % H, d = H * hd;  \
	const int row0 = blockIdx.x * ATT_WARPS, row = row0 + warp;    \
	const long long seq = (long long)b * T * 3 * d

// ATT_KV_TILES lays out the dynamic shared memory sm of the two kernels
// that walk the keys a tile at a time (attention_fwd, attention_bwd_dq):
// ld = hd + 1, the tiles Ks and Vs [ATT_TILE][ld], then the block's query
// rows Qs [ATT_WARPS][hd]. The kernel's parameter hd must be in scope.
#define ATT_KV_TILES(sm)                \
	const int ld = hd + 1;          \
	float* Ks = (sm);               \
	float* Vs = Ks + ATT_TILE * ld; \
	float* Qs = Vs + ATT_TILE * ld

// att_accumulate adds Σ_jj w_jj·tile[jj] to a warp's output row acc, where
// lane jj of the warp holds the weight w_jj of tile row jj (a probability
// or a score gradient) and each lane owns the features lane, lane + 32, …
// of acc, in the order jj = 0, 1, ….
__device__ __forceinline__ void att_accumulate(float acc[ATT_MAXR], float w, const float* tile, int ld, int hd,
                                               int lane) {
	for (int jj = 0; jj < ATT_TILE; jj++) {
		float wj = __shfl_sync(0xffffffffu, w, jj);
#pragma unroll
		for (int r = 0; r < ATT_MAXR; r++) {
			int c = lane + 32 * r;
			if (c < hd)
				acc[r] += wj * tile[jj * ld + c];
		}
	}
}

// cohort:dtypes
// att_load_kv_X fills the shared tiles Ks and Vs (rows of ld floats) with
// the keys and values of rows j0 … j0 + ATT_TILE − 1 of head h of the
// sequence that starts at qkv[seq], zeros past T. The whole block calls it.
__device__ __forceinline__ void att_load_kv_X(float* Ks, float* Vs, const floatX* qkv, long long seq, int h, int j0,
                                              int T, int d, int hd, int ld) {
	for (int e = threadIdx.x; e < ATT_TILE * hd; e += blockDim.x) {
		int jj = e / hd, c = e % hd, j = j0 + jj;
		long long at = seq + (long long)j * 3 * d + h * hd + c;
		Ks[jj * ld + c] = j < T ? f32(qkv[at + d]) : 0.0f;
		Vs[jj * ld + c] = j < T ? f32(qkv[at + 2 * d]) : 0.0f;
	}
}

extern "C" __global__ void attention_fwd_X(floatX* y, float* lse, const floatX* qkv, int B, int T, int H, int hd,
                                           float scale, int causal) {
	extern __shared__ float sm[];
	ATT_KV_TILES(sm);
	ATT_WARP_ROW(i);
	float* q = Qs + warp * hd;
	for (int c = lane; c < hd; c += 32)
		q[c] = i < T ? f32(qkv[seq + (long long)i * 3 * d + h * hd + c]) : 0.0f;
	float m = -INFINITY, l = 0.0f, o[ATT_MAXR] = {0.0f, 0.0f, 0.0f, 0.0f};
	const int kend = causal ? min(T, row0 + ATT_WARPS) : T;
	for (int j0 = 0; j0 < kend; j0 += ATT_TILE) {
		__syncthreads(); // the previous tile is consumed
		att_load_kv_X(Ks, Vs, qkv, seq, h, j0, T, d, hd, ld);
		__syncthreads();
		const int j = j0 + lane;
		float s = -INFINITY;
		if (i < T && j < T && (!causal || j <= i)) {
			float dot = 0.0f;
			for (int c = 0; c < hd; c++)
				dot += q[c] * Ks[lane * ld + c];
			s = scale * dot;
		}
		float mnew = fmaxf(m, warp_max(s));
		if (mnew == -INFINITY)
			continue; // nothing visible yet (only rows past T)
		float p = expf(s - mnew), corr = expf(m - mnew);
		l = l * corr + warp_sum(p);
		m = mnew;
#pragma unroll
		for (int r = 0; r < ATT_MAXR; r++)
			o[r] *= corr;
		att_accumulate(o, p, Vs, ld, hd, lane);
	}
	if (i >= T)
		return;
	float inv = 1.0f / l;
#pragma unroll
	for (int r = 0; r < ATT_MAXR; r++) {
		int c = lane + 32 * r;
		if (c < hd)
			y[((long long)b * T + i) * d + h * hd + c] = round_X(o[r] * inv);
	}
	if (lane == 0)
		lse[((long long)b * H + h) * T + i] = m + logf(l);
}

// attention_bwd_dq writes the q part of dqkv and delta [B, H, T] = Σ dy·y
// per row.
extern "C" __global__ void attention_bwd_dq_X(floatX* dqkv, float* delta, const floatX* dy, const floatX* y,
                                              const floatX* qkv, const float* lse, int B, int T, int H, int hd,
                                              float scale, int causal) {
	extern __shared__ float sm[];
	ATT_KV_TILES(sm);
	float* Gs = Qs + ATT_WARPS * hd;      // [ATT_WARPS][hd]: dy rows
	ATT_WARP_ROW(i);
	float* q = Qs + warp * hd;
	float* g = Gs + warp * hd;
	float dl = 0.0f;
	for (int c = lane; c < hd; c += 32) {
		bool in = i < T;
		long long yo = ((long long)b * T + i) * d + h * hd + c;
		q[c] = in ? f32(qkv[seq + (long long)i * 3 * d + h * hd + c]) : 0.0f;
		g[c] = in ? f32(dy[yo]) : 0.0f;
		dl += in ? g[c] * f32(y[yo]) : 0.0f;
	}
	dl = warp_sum(dl);
	const long long ro = ((long long)b * H + h) * T + i;
	const float L = i < T ? lse[ro] : 0.0f;
	if (i < T && lane == 0)
		delta[ro] = dl;
	float dq[ATT_MAXR] = {0.0f, 0.0f, 0.0f, 0.0f};
	const int kend = causal ? min(T, row0 + ATT_WARPS) : T;
	for (int j0 = 0; j0 < kend; j0 += ATT_TILE) {
		__syncthreads();
		att_load_kv_X(Ks, Vs, qkv, seq, h, j0, T, d, hd, ld);
		__syncthreads();
		const int j = j0 + lane;
		float ds = 0.0f;
		if (i < T && j < T && (!causal || j <= i)) {
			float s = 0.0f, dp = 0.0f;
			for (int c = 0; c < hd; c++) {
				s += q[c] * Ks[lane * ld + c];
				dp += g[c] * Vs[lane * ld + c];
			}
			float p = expf(scale * s - L);
			ds = p * (dp - dl);
		}
		att_accumulate(dq, ds, Ks, ld, hd, lane);
	}
	if (i >= T)
		return;
#pragma unroll
	for (int r = 0; r < ATT_MAXR; r++) {
		int c = lane + 32 * r;
		if (c < hd)
			dqkv[seq + (long long)i * 3 * d + h * hd + c] = round_X(scale * dq[r]);
	}
}

// attention_bwd_dkv writes the k and v parts of dqkv; it reads the delta
// that attention_bwd_dq wrote.
extern "C" __global__ void attention_bwd_dkv_X(floatX* dqkv, const float* delta, const floatX* dy, const floatX* qkv,
                                               const float* lse, int B, int T, int H, int hd, float scale,
                                               int causal) {
	extern __shared__ float sm[];
	const int ld = hd + 1;
	float* Qs = sm;                       // [ATT_TILE][ld]: query rows
	float* Gs = Qs + ATT_TILE * ld;       // [ATT_TILE][ld]: their dy rows
	float* Kw = Gs + ATT_TILE * ld;       // [ATT_WARPS][hd]: this block's keys
	float* Vw = Kw + ATT_WARPS * hd;      // [ATT_WARPS][hd]
	float* Ls = Vw + ATT_WARPS * hd;      // [ATT_TILE]: lse of the query rows
	float* Ds = Ls + ATT_TILE;            // [ATT_TILE]: their delta
	ATT_WARP_ROW(j);
	const long long ro = ((long long)b * H + h) * T;
	float* k = Kw + warp * hd;
	float* v = Vw + warp * hd;
	for (int c = lane; c < hd; c += 32) {
		long long at = seq + (long long)j * 3 * d + h * hd + c;
		k[c] = j < T ? f32(qkv[at + d]) : 0.0f;
		v[c] = j < T ? f32(qkv[at + 2 * d]) : 0.0f;
	}
	float dk[ATT_MAXR] = {0.0f, 0.0f, 0.0f, 0.0f}, dv[ATT_MAXR] = {0.0f, 0.0f, 0.0f, 0.0f};
	const int istart = causal ? row0 / ATT_TILE * ATT_TILE : 0;
	for (int i0 = istart; i0 < T; i0 += ATT_TILE) {
		__syncthreads();
		for (int e = threadIdx.x; e < ATT_TILE * hd; e += blockDim.x) {
			int ii = e / hd, c = e % hd, i = i0 + ii;
			bool in = i < T;
			Qs[ii * ld + c] = in ? f32(qkv[seq + (long long)i * 3 * d + h * hd + c]) : 0.0f;
			Gs[ii * ld + c] = in ? f32(dy[((long long)b * T + i) * d + h * hd + c]) : 0.0f;
		}
		if (threadIdx.x < ATT_TILE) {
			int i = i0 + threadIdx.x;
			Ls[threadIdx.x] = i < T ? lse[ro + i] : 0.0f;
			Ds[threadIdx.x] = i < T ? delta[ro + i] : 0.0f;
		}
		__syncthreads();
		const int i = i0 + lane;
		float p = 0.0f, ds = 0.0f;
		if (j < T && i < T && (!causal || j <= i)) {
			float s = 0.0f, dp = 0.0f;
			for (int c = 0; c < hd; c++) {
				s += Qs[lane * ld + c] * k[c];
				dp += Gs[lane * ld + c] * v[c];
			}
			p = expf(scale * s - Ls[lane]);
			ds = p * (dp - Ds[lane]);
		}
		for (int ii = 0; ii < ATT_TILE; ii++) {
			float pi = __shfl_sync(0xffffffffu, p, ii), dsi = __shfl_sync(0xffffffffu, ds, ii);
#pragma unroll
			for (int r = 0; r < ATT_MAXR; r++) {
				int c = lane + 32 * r;
				if (c < hd) {
					dv[r] += pi * Gs[ii * ld + c];
					dk[r] += dsi * Qs[ii * ld + c];
				}
			}
		}
	}
	if (j >= T)
		return;
#pragma unroll
	for (int r = 0; r < ATT_MAXR; r++) {
		int c = lane + 32 * r;
		if (c < hd) {
			long long at = seq + (long long)j * 3 * d + h * hd + c;
			dqkv[at + d] = round_X(scale * dk[r]);
			dqkv[at + 2 * d] = round_X(dv[r]);
		}
	}
}
// cohort:end
