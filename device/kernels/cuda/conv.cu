// im2col and col2im for conv2d as a GEMM, with the CPU's layout: samples
// [n0, n0 + nb) of x [N, C, H, W] unfold to col [C·KH·KW, nb·OH·OW], row
// (c·KH + ki)·KW + kj, column n·OH·OW + oh·OW + ow, holding
// x[n0 + n, c, oh·stride − pad + ki, ow·stride − pad + kj] (0 outside the
// input). CPU twins: tensor's im2colInto and col2imAdd (conv_im2col.go).
//
// col2im is written as a gather, one thread per input element adding the
// columns that read it in (ki, kj) order onto dx: no atomics, and the
// CPU's order of additions, so the result is the CPU's to the bit.

// cohort:dtypes
extern "C" __global__ void im2col_X(floatX* col, const floatX* x, int n0, int nb, int C, int H, int W, int KH, int KW,
                                    int stride, int pad, int OH, int OW) {
	long long L = (long long)OH * OW, cols = nb * L;
	long long total = (long long)C * KH * KW * cols;
	GRID_LOOP(e, total) {
		long long r = e / cols, k = e % cols;
		int n = k / L, l = k % L, oh = l / OW, ow = l % OW;
		int kj = r % KW, ki = (r / KW) % KH, c = r / (KW * KH);
		int ih = oh * stride - pad + ki, iw = ow * stride - pad + kj;
		bool in = ih >= 0 && ih < H && iw >= 0 && iw < W;
		col[e] = in ? x[(((long long)(n0 + n) * C + c) * H + ih) * W + iw] : round_X(0.0f);
	}
}

extern "C" __global__ void col2im_X(floatX* dx, const floatX* col, int n0, int nb, int C, int H, int W, int KH,
                                    int KW, int stride, int pad, int OH, int OW) {
	long long L = (long long)OH * OW, cols = nb * L;
	long long total = (long long)nb * C * H * W;
	GRID_LOOP(e, total) {
		int iw = e % W, ih = (e / W) % H, c = (e / ((long long)W * H)) % C;
		int n = e / ((long long)W * H * C);
		long long at = (long long)n0 * C * H * W + e;
		float acc = f32(dx[at]);
		for (int ki = 0; ki < KH; ki++) {
			int t = ih + pad - ki;
			if (t < 0 || t % stride != 0 || t / stride >= OH)
				continue;
			int oh = t / stride;
			for (int kj = 0; kj < KW; kj++) {
				int u = iw + pad - kj;
				if (u < 0 || u % stride != 0 || u / stride >= OW)
					continue;
				int ow = u / stride;
				long long r = ((long long)c * KH + ki) * KW + kj;
				acc = __fadd_rn(acc, f32(col[r * cols + n * L + (long long)oh * OW + ow]));
			}
		}
		dx[at] = round_X(acc);
	}
}
// cohort:end
