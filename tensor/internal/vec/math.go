package vec

import "math"

// Transcendental kernels: exp (softmax, cross-entropy) and GELU-tanh with
// its derivative, in float32. Math selects the implementation once: the
// AVX2+FMA assembly (math_amd64.s) on CPUs that have it, otherwise a
// portable Go version of the same algorithm (also the tail of every
// assembly call).
//
// Error bounds, measured against float64 on every float32 in the stated
// ranges and checked by the tests (math_test.go), on both paths:
//
//   - exp: ≤ 2 ULP for x in [−87.3, 88]; x < −87.33654 gives +0 (the exact
//     value is below 2⁻¹²⁶), x > 88 gives e⁸⁸ (no +Inf), NaN stays NaN.
//   - GELU-tanh, y = ½x·(1 + tanh(√(2/π)(x + 0.044715x³))), computed as
//     x·σ(2u) with no cancellation: ≤ 4 ULP + 3·|2u| ULP (the float32
//     rounding of the argument 2u, which exp amplifies by |2u|) for
//     x ≥ −9; below, |y| < 1e-30 and the error is under 1e-30.
//   - its derivative: within 8 ULP + 3·|2u| ULP of its magnitude or 2e-7
//     absolute, whichever is larger (the derivative crosses zero near
//     x = −0.75, where relative error means nothing).
//
// Reductions (ExpShiftSum, Dot, the LayerNorm row sums) sum in float32
// over 8 (or 16) lanes, then across them, in the assembly, and in float64
// on the portable path.
//
// Where the CPU has AVX-512F too, exp, ExpShiftSum, GELU-tanh and its
// derivative run 16 lanes at a time, with the AVX2 kernels' operations
// lane for lane: an element's value is the same on either (ExpShiftSum's
// sum is taken over 16 lanes instead of 8).
type Math struct{ asm, wide bool }

// NewMath returns the kernels: the assembly where the CPU has AVX2 and FMA
// unless portable is set (the pure-Go configuration, COHORT_GEMM_KERNEL=go),
// 16 lanes wide where it has AVX-512F as well.
func NewMath(portable bool) Math {
	asm := !portable && useAVX2 && hasFMA
	return Math{asm: asm, wide: asm && useAVX512}
}

// wide16 runs f16 on the longest prefix of n elements that is a multiple
// of 16 when m is 16 lanes wide, and f8 on what is left of it in multiples
// of 8 (all of it otherwise); it returns where the Go tail starts. f16 and
// f8 take the offset and the length.
func (m Math) wide16(n int, f16, f8 func(off, n int)) int {
	done := 0
	if m.wide {
		done = n &^ 15
		if done > 0 {
			f16(0, done)
		}
	}
	if rest := (n - done) &^ 7; rest > 0 {
		f8(done, rest)
		done += rest
	}
	return done
}

// unary runs the element-wise kernels f16 and f8 (dst, src, n) over dst
// and src as wide16 splits them when m runs the assembly, and returns
// where the Go tail starts (0 when it does not).
func (m Math) unary(dst, src []float32, f16, f8 func(dst, src *float32, n int)) int {
	if !m.asm {
		return 0
	}
	return m.wide16(len(dst),
		func(o, k int) { f16(&dst[o], &src[o], k) },
		func(o, k int) { f8(&dst[o], &src[o], k) })
}

// Asm reports whether m runs the assembly kernels.
func (m Math) Asm() bool { return m.asm }

// Exp writes exp(src[i]) into dst[i] for i < len(dst). dst may be src.
func (m Math) Exp(dst, src []float32) {
	src = src[:len(dst)]
	for i := m.unary(dst, src, expAVX512, expAVX2); i < len(dst); i++ {
		dst[i] = exp32(src[i])
	}
}

// ExpShiftSum writes exp(scale·src[i] − shift) into dst[i] for i <
// len(dst) and returns their sum. dst may be src. With shift the maximum
// of scale·src it is the numerator of a stable softmax.
func (m Math) ExpShiftSum(dst, src []float32, scale, shift float32) float32 {
	src = src[:len(dst)]
	if m.asm {
		var sum float32
		n := m.wide16(len(dst),
			func(o, k int) { sum += expShiftSumAVX512(&dst[o], &src[o], k, scale, shift) },
			func(o, k int) { sum += expShiftSumAVX2(&dst[o], &src[o], k, scale, shift) })
		for i := n; i < len(dst); i++ {
			e := exp32(scale*src[i] - shift)
			dst[i] = e
			sum += e
		}
		return sum
	}
	var sum float64 // the portable path sums in float64
	for i := range dst {
		e := exp32(scale*src[i] - shift)
		dst[i] = e
		sum += float64(e)
	}
	return float32(sum)
}

// GELUTanh writes GELU-tanh(src[i]) into dst[i] for i < len(dst). dst
// may be src.
func (m Math) GELUTanh(dst, src []float32) {
	src = src[:len(dst)]
	for i := m.unary(dst, src, geluTanhAVX512, geluTanhAVX2); i < len(dst); i++ {
		x := src[i]
		dst[i] = x / (1 + exp32(x*(geluA+geluB*x*x)))
	}
}

// GELUTanhGrad writes g[i]·GELU-tanh′(x[i]) into dst[i] for i < len(dst).
// dst may be g or x.
func (m Math) GELUTanhGrad(dst, g, x []float32) {
	g = g[:len(dst)]
	x = x[:len(dst)]
	n := 0
	if m.asm {
		n = m.wide16(len(dst),
			func(o, k int) { geluTanhGradAVX512(&dst[o], &g[o], &x[o], k) },
			func(o, k int) { geluTanhGradAVX2(&dst[o], &g[o], &x[o], k) })
	}
	for i := n; i < len(dst); i++ {
		v := x[i]
		v2 := v * v
		e := exp32(v * (geluA + geluB*v2))
		s := 1 / (1 + e)
		q := v * (geluD*v2 - geluA) * (e * s)
		dst[i] = g[i] * (q*s + s)
	}
}

// Max returns the largest element of src (−Inf when empty). With NaNs
// present the result is unspecified.
func (m Math) Max(src []float32) float32 {
	mx := float32(math.Inf(-1))
	n := 0
	if m.asm && len(src) >= 8 {
		n = len(src) &^ 7
		mx = maxAVX2(&src[0], n)
	}
	for _, v := range src[n:] {
		if v > mx {
			mx = v
		}
	}
	return mx
}

// SoftmaxRows replaces each row i of the T×T block s by its softmax over
// columns j ≤ i when causal (the rest set to 0), over all T otherwise: the
// row's max (−Inf taken as 0) is subtracted before exp, and the sum
// scales the row by its float32 reciprocal. The masked columns up to the
// next multiple of 16 are taken as −Inf, whose exp is exactly 0, so the
// kernels see whole vectors. Where the kernels are 16 lanes wide and T is
// a multiple of 16, one assembly call does the whole block with the same
// result, bit for bit, as the row-by-row Max, ExpShiftSum and Scale.
func (m Math) SoftmaxRows(s []float32, T int, causal bool) {
	if T == 0 {
		return
	}
	s = s[:T*T]
	if m.wide && T%16 == 0 {
		softmaxRowsAVX512(&s[0], T, causal)
		return
	}
	m.softmaxRowsLoop(s, T, causal)
}

// softmaxRowsLoop is SoftmaxRows one row at a time.
func (m Math) softmaxRowsLoop(s []float32, T int, causal bool) {
	for i := 0; i < T; i++ {
		row := s[i*T : (i+1)*T]
		n := T
		if causal {
			n = i + 1
		}
		mx := m.Max(row[:n])
		if math.IsInf(float64(mx), -1) {
			mx = 0
		}
		w := min(T, (n+15)&^15)
		for j := n; j < w; j++ {
			row[j] = float32(math.Inf(-1))
		}
		sum := m.ExpShiftSum(row[:w], row[:w], 1, mx)
		m.Scale(row[:w], row[:w], 1/sum)
		clear(row[w:])
	}
}

// Dot returns Σ a[i]·b[i] over i < len(a).
func (m Math) Dot(a, b []float32) float32 {
	b = b[:len(a)]
	if m.asm {
		n := len(a) &^ 7
		var s float32
		if n > 0 {
			s = dotAVX2(&a[0], &b[0], n)
		}
		for i := n; i < len(a); i++ {
			s += a[i] * b[i]
		}
		return s
	}
	var s float64 // the portable path sums in float64
	for i := range a {
		s += float64(a[i]) * float64(b[i])
	}
	return float32(s)
}

// SoftmaxGradRow turns ds, the gradient of a softmax row's output p, into
// the gradient of its input times scale: ds[i] = p[i]·(ds[i] − Σ_j p[j]·ds[j])·scale
// for i < len(ds).
func (m Math) SoftmaxGradRow(ds, p []float32, scale float32) {
	p = p[:len(ds)]
	dot := m.Dot(p, ds)
	n := 0
	if m.asm {
		n = len(ds) &^ 7
		if n > 0 {
			softmaxGradAVX2(&ds[0], &p[0], n, dot, scale)
		}
	}
	for i := n; i < len(ds); i++ {
		ds[i] = p[i] * (ds[i] - dot) * scale
	}
}

// SoftmaxGradRows is SoftmaxGradRow on every row i of the T×T blocks ds
// and p, over columns j ≤ i when causal (the rest of ds set to 0), over
// all T otherwise. Where the kernels are 16 lanes wide and T is a multiple
// of 16, one assembly call does the whole block, its dots summed over 16
// lanes (a rounding apart from the row-by-row dot's 8).
func (m Math) SoftmaxGradRows(ds, p []float32, T int, causal bool, scale float32) {
	if T == 0 {
		return
	}
	ds, p = ds[:T*T], p[:T*T]
	if m.wide && T%16 == 0 {
		softmaxGradRowsAVX512(&ds[0], &p[0], T, causal, scale)
		return
	}
	for i := 0; i < T; i++ {
		n := T
		if causal {
			n = i + 1
		}
		row := ds[i*T : (i+1)*T]
		m.SoftmaxGradRow(row[:n], p[i*T:i*T+n], scale)
		clear(row[n:])
	}
}

// Scale writes a·src[i] into dst[i] for i < len(dst). dst may be src.
func (m Math) Scale(dst, src []float32, a float32) {
	src = src[:len(dst)]
	n := 0
	if m.asm {
		n = len(dst) &^ 7
		if n > 0 {
			scaleAVX2(&dst[0], &src[0], n, a)
		}
	}
	for i := n; i < len(dst); i++ {
		dst[i] = a * src[i]
	}
}

// Constants of exp32 and the GELU kernels, the float32 values of the
// assembly's tables.
const (
	expHi = 88.0
	expLo = -87.33654
	log2e = 1.44269504088896341
	expC1 = 0.693359375
	expC2 = -2.12194440e-4
	expP0 = 1.9875691500e-4
	expP1 = 1.3981999507e-3
	expP2 = 8.3334519073e-3
	expP3 = 4.1665795894e-2
	expP4 = 1.6666665459e-1
	expP5 = 5.0000001201e-1

	geluA = -1.5957691216057308  // −2·√(2/π)
	geluB = -0.07135481627159766 // −2·√(2/π)·0.044715
	geluD = 0.21406444881479298  // 3·2·√(2/π)·0.044715
)

// exp32 is the portable exp: the assembly's algorithm (see
// math_amd64.s) without fused multiply-adds.
func exp32(x float32) float32 {
	if x != x {
		return x
	}
	if x < expLo {
		return 0
	}
	x = min(x, expHi)
	n := float32(math.Floor(float64(x*log2e) + 0.5)) // ties differ from the assembly's round-to-even; both are in range
	r := x - n*expC1
	r -= n * expC2
	p := float32(expP0)
	p = p*r + expP1
	p = p*r + expP2
	p = p*r + expP3
	p = p*r + expP4
	p = p*r + expP5
	y := p*(r*r) + r + 1
	return y * math.Float32frombits(uint32(int32(n)+127)<<23)
}

// LayerNormRow writes (src − mean)·rstd·w + b into dst (len(dst) = D;
// dst may be src) and returns the row's mean and rstd = 1/√(var + eps),
// var the biased variance, all in float32 (8-lane sums).
func (m Math) LayerNormRow(dst, src, w, b []float32, eps float32) (mean, rstd float32) {
	n := len(dst)
	src, w, b = src[:n], w[:n], b[:n]
	if n == 0 {
		return 0, float32(1 / math.Sqrt(float64(eps)))
	}
	invN := 1 / float32(n)
	if m.asm && n%8 == 0 {
		var stats [2]float32
		layerNormRowAVX2(&dst[0], &src[0], &w[0], &b[0], n, invN, eps, &stats[0])
		return stats[0], stats[1]
	}
	// The portable path sums in float64 (a sequential float32 sum would
	// round more than the assembly's eight lanes).
	m64, ss := MeanSquares(src)
	mean = float32(m64)
	rstd = float32(1 / math.Sqrt(ss/float64(n)+float64(eps)))
	for j, v := range src {
		dst[j] = (v-mean)*rstd*w[j] + b[j]
	}
	return mean, rstd
}

// MeanSquares returns the mean of src and the sum of its squared
// deviations from it, both summed in float64 in order (two passes).
func MeanSquares(src []float32) (mean, ss float64) {
	var s float64
	for _, v := range src {
		s += float64(v)
	}
	mean = s / float64(len(src))
	for _, v := range src {
		d := float64(v) - mean
		ss += d * d
	}
	return mean, ss
}

// LayerNormRows is LayerNormRow on each of the len(mean) consecutive rows
// of n in src and dst, its statistics into mean and rstd: the assembly
// takes the rows two at a time, each row's passes interleaved with the
// other's (the same results, bit for bit, as one row at a time).
func (m Math) LayerNormRows(dst, src, w, b []float32, n int, eps float32, mean, rstd []float32) {
	rows := len(mean)
	rstd = rstd[:rows]
	r := 0
	if m.asm && n%8 == 0 && n > 0 && rows > 1 {
		_, _, _, _ = dst[rows*n-1], src[rows*n-1], w[n-1], b[n-1]
		invN := 1 / float32(n)
		var stats [4]float32
		for ; r+2 <= rows; r += 2 {
			layerNormRows2AVX2(&dst[r*n], &src[r*n], &w[0], &b[0], n, invN, eps, &stats[0])
			mean[r], rstd[r], mean[r+1], rstd[r+1] = stats[0], stats[1], stats[2], stats[3]
		}
	}
	for ; r < rows; r++ {
		mean[r], rstd[r] = m.LayerNormRow(dst[r*n:][:n], src[r*n:][:n], w, b, eps)
	}
}

// LayerNormGradRows is LayerNormGradRow on each of the len(mean)
// consecutive rows of n in dx, grad and x, in order, two at a time in the
// assembly (the same results, bit for bit, as one row at a time).
func (m Math) LayerNormGradRows(dx, grad, x, w, dw, db []float32, n int, mean, rstd []float32) {
	rows := len(mean)
	rstd = rstd[:rows]
	r := 0
	if m.asm && n%8 == 0 && n > 0 && rows > 1 {
		_, _, _ = dx[rows*n-1], grad[rows*n-1], x[rows*n-1]
		_, _, _ = w[n-1], dw[n-1], db[n-1]
		invN := 1 / float32(n)
		for ; r+2 <= rows; r += 2 {
			layerNormGradRows2AVX2(&dx[r*n], &grad[r*n], &x[r*n], &w[0], &dw[0], &db[0], n, mean[r], rstd[r], mean[r+1], rstd[r+1], invN)
		}
	}
	for ; r < rows; r++ {
		m.LayerNormGradRow(dx[r*n:][:n], grad[r*n:][:n], x[r*n:][:n], w, dw, db, mean[r], rstd[r])
	}
}

// LayerNormGradRow is the backward pass of LayerNormRow for one row: with
// x̂ = (x − mean)·rstd and dh = grad·w, it adds grad·x̂ into dw and grad
// into db, and writes dx = rstd·(dh − mean(dh) − x̂·mean(dh·x̂)). dx may
// be grad.
func (m Math) LayerNormGradRow(dx, grad, x, w, dw, db []float32, mean, rstd float32) {
	n := len(dx)
	grad, x, w, dw, db = grad[:n], x[:n], w[:n], dw[:n], db[:n]
	if n == 0 {
		return
	}
	invN := 1 / float32(n)
	if m.asm && n%8 == 0 {
		layerNormGradRowAVX2(&dx[0], &grad[0], &x[0], &w[0], &dw[0], &db[0], n, mean, rstd, invN)
		return
	}
	var s1, s2 float64 // float64 on the portable path, as in LayerNormRow
	for j, v := range x {
		xh := (v - mean) * rstd
		g := grad[j]
		dw[j] += g * xh
		db[j] += g
		dh := g * w[j]
		s1 += float64(dh)
		s2 += float64(dh) * float64(xh)
	}
	m1, m2 := float32(s1*float64(invN)), float32(s2*float64(invN))
	for j, v := range x {
		xh := (v - mean) * rstd
		dx[j] = rstd * (grad[j]*w[j] - m1 - xh*m2)
	}
}
