// 2-D pooling over planes = N·C planes of H × W, square windows of k with
// equal stride s and zero padding p on both axes (floor mode), fp32. CPU
// twins: tensor.MaxPool2d / MaxPool2dBackward (the first maximum in
// row-major window order, padding counting as −∞; argmax is the index
// h·W + w within the plane) and tensor.AvgPool2d / AvgPool2dBackward
// (padding counted in the mean: count_include_pad).
//
// The backward passes gather: one thread per input element adds the
// outputs whose windows cover it, in output order (the CPU's order of
// additions for max pooling), so there are no atomics.

// pool_window gives the input rows (or columns) [lo, hi) that the window of
// output row (or column) o covers, o·s − p … o·s − p + k − 1, clipped to
// the input's [0, n): the forward passes visit them in row-major window
// order, as the CPU does, skipping the padding.
__device__ __forceinline__ void pool_window(int o, int n, int k, int s, int p, int* lo, int* hi) {
	*lo = max(0, o * s - p);
	*hi = min(n, o * s - p + k);
}

extern "C" __global__ void maxpool_fwd(float* y, int* argmax, const float* x, int planes, int H, int W, int OH, int OW,
                                       int k, int s, int p) {
	long long n = (long long)planes * OH * OW;
	GRID_LOOP(e, n) {
		int ow = e % OW, oh = (e / OW) % OH;
		long long pl = e / ((long long)OW * OH);
		const float* xp = x + pl * H * W;
		float best = -INFINITY;
		int at = -1;
		int ih0, ih1, iw0, iw1;
		pool_window(oh, H, k, s, p, &ih0, &ih1);
		pool_window(ow, W, k, s, p, &iw0, &iw1);
		for (int ih = ih0; ih < ih1; ih++)
			for (int iw = iw0; iw < iw1; iw++) {
				float v = xp[ih * W + iw];
				if (at < 0 || v > best || (v != v && best == best)) {
					best = v;
					at = ih * W + iw;
				}
			}
		y[e] = best;
		argmax[e] = at;
	}
}

extern "C" __global__ void maxpool_bwd(float* dx, const float* dy, const int* argmax, int planes, int H, int W, int OH,
                                       int OW, int k, int s, int p) {
	long long n = (long long)planes * H * W;
	GRID_LOOP(e, n) {
		int idx = e % ((long long)H * W), iw = idx % W, ih = idx / W;
		long long pl = e / ((long long)H * W);
		float acc = 0.0f;
		int oh0 = max(0, (ih + p - k + s) / s), oh1 = min(OH - 1, (ih + p) / s);
		int ow0 = max(0, (iw + p - k + s) / s), ow1 = min(OW - 1, (iw + p) / s);
		for (int oh = oh0; oh <= oh1; oh++)
			for (int ow = ow0; ow <= ow1; ow++) {
				long long o = (pl * OH + oh) * OW + ow;
				if (argmax[o] == idx)
					acc = __fadd_rn(acc, dy[o]);
			}
		dx[e] = acc;
	}
}

extern "C" __global__ void avgpool_fwd(float* y, const float* x, int planes, int H, int W, int OH, int OW, int k, int s,
                                       int p) {
	long long n = (long long)planes * OH * OW;
	GRID_LOOP(e, n) {
		int ow = e % OW, oh = (e / OW) % OH;
		const float* xp = x + e / ((long long)OW * OH) * H * W;
		float sum = 0.0f;
		int ih0, ih1, iw0, iw1;
		pool_window(oh, H, k, s, p, &ih0, &ih1);
		pool_window(ow, W, k, s, p, &iw0, &iw1);
		for (int ih = ih0; ih < ih1; ih++)
			for (int iw = iw0; iw < iw1; iw++)
				sum += xp[ih * W + iw];
		y[e] = sum / (float)(k * k);
	}
}

extern "C" __global__ void avgpool_bwd(float* dx, const float* dy, int planes, int H, int W, int OH, int OW, int k,
                                       int s, int p) {
	long long n = (long long)planes * H * W;
	GRID_LOOP(e, n) {
		int iw = e % W, ih = (e / W) % H;
		long long pl = e / ((long long)H * W);
		float acc = 0.0f;
		int oh0 = max(0, (ih + p - k + s) / s), oh1 = min(OH - 1, (ih + p) / s);
		int ow0 = max(0, (iw + p - k + s) / s), ow1 = min(OW - 1, (iw + p) / s);
		for (int oh = oh0; oh <= oh1; oh++)
			for (int ow = ow0; ow <= ow1; ow++)
				acc += dy[(pl * OH + oh) * OW + ow];
		dx[e] = acc / (float)(k * k);
	}
}
