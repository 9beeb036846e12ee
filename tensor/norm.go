package tensor

import (
	"math"

	"github.com/cohortml/cohort/tensor/internal/vec"
)

// Normalisation kernels. Statistics are accumulated in float64.

// LayerNorm normalises each row of x over its last dimension (size D):
// y = (x − mean)/√(var + eps)·w + b with the biased variance. w and b are
// [D] or nil (no affine transform). It also returns each row's mean and
// 1/√(var + eps), which LayerNormBackward needs.
func LayerNorm(x, w, b *Tensor, eps float64) (y *Tensor, mean, rstd []float32) {
	if x.buf != nil {
		x.notHost("LayerNorm (LayerNormStats keeps the statistics on the device)")
	}
	D := layerNormCheck(x, w, b)
	xd := x.Contiguous().Data()
	if w != nil && b != nil && D > 0 {
		// The affine case, row by row on the vector kernels (float32
		// statistics, 8-lane sums), every element of y written.
		y = Empty(x.shape...)
		yd := y.Data()
		m := mathKernels()
		wd, bd := w.Contiguous().Data(), b.Contiguous().Data()
		rows := len(xd) / D
		mean, rstd = make([]float32, rows), make([]float32, rows)
		parallelRanges(rows, max(1, elementwiseMin/D), 2, func(lo, hi int) {
			m.LayerNormRows(yd[lo*D:hi*D], xd[lo*D:hi*D], wd, bd, D, float32(eps), mean[lo:hi], rstd[lo:hi])
		})
		return y, mean, rstd
	}
	y = New(x.shape...)
	yd := y.Data()
	var wd, bd []float32
	if w != nil {
		wd = w.Contiguous().Data()
	}
	if b != nil {
		bd = b.Contiguous().Data()
	}
	rows := 0
	if D > 0 {
		rows = len(xd) / D
	}
	mean, rstd = make([]float32, rows), make([]float32, rows)
	for r := 0; r < rows; r++ {
		row := xd[r*D:][:D]
		m, ss := vec.MeanSquares(row)
		rs := 1 / math.Sqrt(ss/float64(D)+eps)
		mean[r], rstd[r] = float32(m), float32(rs)
		out := yd[r*D:][:D]
		for j, v := range row {
			h := (float64(v) - m) * rs
			if wd != nil {
				h *= float64(wd[j])
			}
			if bd != nil {
				h += float64(bd[j])
			}
			out[j] = float32(h)
		}
	}
	return y, mean, rstd
}

// LayerNormBackward returns the gradients of LayerNorm given dy, the input
// x, the weight w (nil when none) and the saved mean and rstd: dx, and dw,
// db ([D]; nil when w is nil).
func LayerNormBackward(dy, x, w *Tensor, mean, rstd []float32) (dx, dw, db *Tensor) {
	if x.buf != nil {
		x.notHost("LayerNormBackward (LayerNormStatsBackward keeps the statistics on the device)")
	}
	if !dy.SameShape(x) {
		panicf("LayerNormBackward: gradient shape %v, input shape %v", dy.shape, x.shape)
	}
	D := x.shape[len(x.shape)-1]
	xd := x.Contiguous().Data()
	gd := dy.Contiguous().Data()
	if w != nil && D > 0 { // every row of dx written
		return layerNormBackwardRows(gd, xd, w.Contiguous().Data(), Empty(x.shape...), false, mean, rstd, D)
	}
	dx = New(x.shape...)
	dxd := dx.Data()
	var wd []float32
	var dwAcc, dbAcc []float64
	if w != nil {
		wd = w.Contiguous().Data()
		dwAcc, dbAcc = make([]float64, D), make([]float64, D)
	}
	for r := range mean {
		row, g, out := xd[r*D:][:D], gd[r*D:][:D], dxd[r*D:][:D]
		m, rs := float64(mean[r]), float64(rstd[r])
		// dxhat = dy·w; dx = rstd·(dxhat − mean(dxhat) − xhat·mean(dxhat·xhat))
		var s1, s2 float64
		for j, v := range row {
			xh := (float64(v) - m) * rs
			dh := float64(g[j])
			if wd != nil {
				dwAcc[j] += dh * xh
				dbAcc[j] += dh
				dh *= float64(wd[j])
			}
			s1 += dh
			s2 += dh * xh
		}
		s1 /= float64(D)
		s2 /= float64(D)
		for j, v := range row {
			xh := (float64(v) - m) * rs
			dh := float64(g[j])
			if wd != nil {
				dh *= float64(wd[j])
			}
			out[j] = float32(rs * (dh - s1 - xh*s2))
		}
	}
	if w != nil {
		dw, db = New(D), New(D)
		for j := range dwAcc {
			dw.storage[j], db.storage[j] = float32(dwAcc[j]), float32(dbAcc[j])
		}
	}
	return dx, dw, db
}

// BatchNormStats returns the per-channel mean and biased variance of x
// [N, C, ...] over every dimension but 1.
func BatchNormStats(x *Tensor) (mean, variance []float64) {
	if x.buf != nil {
		unsupported("BatchNormStats", x.Device())
	}
	if len(x.shape) < 2 {
		panicf("BatchNormStats: input shape %v, want [N, C, ...]", x.shape)
	}
	N, C := x.shape[0], x.shape[1]
	L := 1
	for _, s := range x.shape[2:] {
		L *= s
	}
	xd := x.Contiguous().Data()
	mean, variance = make([]float64, C), make([]float64, C)
	cnt := float64(N * L)
	for c := 0; c < C; c++ {
		var s float64
		for n := 0; n < N; n++ {
			for _, v := range xd[(n*C+c)*L:][:L] {
				s += float64(v)
			}
		}
		m := s / cnt
		var ss float64
		for n := 0; n < N; n++ {
			for _, v := range xd[(n*C+c)*L:][:L] {
				d := float64(v) - m
				ss += d * d
			}
		}
		mean[c], variance[c] = m, ss/cnt
	}
	return mean, variance
}

// BatchNormApply returns y = (x − mean[c])·scale[c]·w[c] + b[c] for x
// [N, C, ...], where scale is 1/√(var + eps) computed by the caller; w and b
// may be nil.
func BatchNormApply(x, w, b *Tensor, mean, scale []float64) *Tensor {
	N, C := x.shape[0], x.shape[1]
	if len(mean) != C || len(scale) != C {
		panicf("BatchNormApply: %d means and %d scales for input shape %v", len(mean), len(scale), x.shape)
	}
	for _, p := range []*Tensor{w, b} {
		if p != nil && (len(p.shape) != 1 || p.shape[0] != C) {
			panicf("BatchNormApply: parameter shape %v, want [%d] for input shape %v", p.shape, C, x.shape)
		}
	}
	L := x.Len() / max(N*C, 1)
	xd := x.Contiguous().Data()
	y := New(x.shape...)
	yd := y.Data()
	for c := 0; c < C; c++ {
		a := scale[c]
		var bias float64
		if w != nil {
			a *= float64(w.At(c))
		}
		if b != nil {
			bias = float64(b.At(c))
		}
		// y = x·a + (bias − mean·a)
		a32, c32 := float32(a), float32(bias-mean[c]*a)
		for n := 0; n < N; n++ {
			in, out := xd[(n*C+c)*L:][:L], yd[(n*C+c)*L:][:L]
			for i, v := range in {
				out[i] = v*a32 + c32
			}
		}
	}
	return y
}

// BatchNormBackward returns the training-mode gradients of batch
// normalisation given dy, x, w (nil when none) and the batch mean and scale
// (1/√(var + eps)) used in the forward pass: dx, and dw, db ([C]; nil when w
// is nil). When the statistics were fixed (evaluation mode) pass
// batchStats false: dx is then dy·scale·w.
func BatchNormBackward(dy, x, w *Tensor, mean, scale []float64, batchStats bool) (dx, dw, db *Tensor) {
	if !dy.SameShape(x) {
		panicf("BatchNormBackward: gradient shape %v, input shape %v", dy.shape, x.shape)
	}
	N, C := x.shape[0], x.shape[1]
	L := x.Len() / max(N*C, 1)
	xd := x.Contiguous().Data()
	gd := dy.Contiguous().Data()
	dx = New(x.shape...)
	dxd := dx.Data()
	if w != nil {
		dw, db = New(C), New(C)
	}
	cnt := float64(N * L)
	for c := 0; c < C; c++ {
		m, rs := mean[c], scale[c]
		var sg, sgx float64 // Σ dy, Σ dy·xhat
		for n := 0; n < N; n++ {
			in, g := xd[(n*C+c)*L:][:L], gd[(n*C+c)*L:][:L]
			for i, v := range in {
				sg += float64(g[i])
				sgx += float64(g[i]) * (float64(v) - m) * rs
			}
		}
		wc := 1.0
		if w != nil {
			wc = float64(w.At(c))
			dw.storage[c], db.storage[c] = float32(sgx), float32(sg)
		}
		k := wc * rs
		for n := 0; n < N; n++ {
			in, g, out := xd[(n*C+c)*L:][:L], gd[(n*C+c)*L:][:L], dxd[(n*C+c)*L:][:L]
			for i, v := range in {
				if batchStats {
					xh := (float64(v) - m) * rs
					out[i] = float32(k * (float64(g[i]) - sg/cnt - xh*sgx/cnt))
				} else {
					out[i] = float32(k * float64(g[i]))
				}
			}
		}
	}
	return dx, dw, db
}

// LayerNormBackwardAdd is LayerNormBackward with a weight w that adds the
// input gradient onto acc (contiguous, x's shape) instead of returning it:
// bit for bit AddScaled(acc, 1, dx) after LayerNormBackward, without dx.
// A residual stream's gradient, which already holds the skip path's, takes
// the normalisation's so, block by block while each is in cache. acc may
// be dy.
func LayerNormBackwardAdd(acc, dy, x, w *Tensor, mean, rstd []float32) (dw, db *Tensor) {
	if x.buf != nil {
		x.notHost("LayerNormBackwardAdd")
	}
	if !dy.SameShape(x) || !acc.SameShape(x) || !acc.IsContiguous() || w == nil || len(x.shape) == 0 {
		panicf("LayerNormBackwardAdd: accumulator shape %v (contiguous: %v), gradient %v, input %v, weight %v", acc.shape, acc.IsContiguous(), dy.shape, x.shape, w != nil)
	}
	D := x.shape[len(x.shape)-1]
	if D == 0 {
		_, dw, db = LayerNormBackward(dy, x, w, mean, rstd)
		return dw, db
	}
	_, dw, db = layerNormBackwardRows(dy.Contiguous().Data(), x.Contiguous().Data(), w.Contiguous().Data(), acc, true, mean, rstd, D)
	return dw, db
}

// lnBlockRows is how many rows' weight and bias gradients are summed in
// float32 before they are added into the float64 totals.
const lnBlockRows = 64

// layerNormBackwardRows is LayerNormBackward with a weight, row by row on
// the vector kernels.
// With add, each block's input gradient goes to a scratch block and is
// then added onto dx.
func layerNormBackwardRows(gd, xd, wd []float32, dx *Tensor, add bool, mean, rstd []float32, D int) (_, dw, db *Tensor) {
	m := mathKernels()
	dxd := dx.Data()
	// Each block of lnBlockRows rows sums its weight and bias gradients in
	// float32 into a slice of its own; the blocks are then added into the
	// float64 totals in order. The blocks run in parallel (the sums are
	// the same as on one thread).
	rows := len(mean)
	blocks := (rows + lnBlockRows - 1) / lnBlockRows
	part := scratch(2 * D * blocks) // block k: dw at 2Dk, db at 2Dk+D
	defer freeScratch(part)
	parallelRanges(blocks, max(1, elementwiseMin/(D*lnBlockRows)), 1, func(lo, hi int) {
		var scratch []float32
		if add {
			st := Empty(lnBlockRows * D) // from the recycled buffers, and back
			defer Recycle(st)
			scratch = st.Data()
		}
		for k := lo; k < hi; k++ {
			dw32, db32 := part[2*D*k:][:D], part[2*D*k+D:][:D]
			lo, hi := k*lnBlockRows, min(rows, (k+1)*lnBlockRows)
			out := dxd[lo*D : hi*D]
			if add {
				out = scratch[:len(out)]
			}
			m.LayerNormGradRows(out, gd[lo*D:hi*D], xd[lo*D:hi*D], wd, dw32, db32, D, mean[lo:hi], rstd[lo:hi])
			if add {
				vec.Add(dxd[lo*D:hi*D], out)
			}
		}
	})
	dwAcc, dbAcc := make([]float64, D), make([]float64, D)
	for k := range blocks {
		dw32, db32 := part[2*D*k:][:D], part[2*D*k+D:][:D]
		for j := range dwAcc {
			dwAcc[j] += float64(dw32[j])
			dbAcc[j] += float64(db32[j])
		}
	}
	dw, db = New(D), New(D)
	for j := range dwAcc {
		dw.storage[j], db.storage[j] = float32(dwAcc[j]), float32(dbAcc[j])
	}
	return dx, dw, db
}

// layerNormCheck panics unless w and b (each nil or not) are [D] for x's
// last dimension D, and returns D.
func layerNormCheck(x, w, b *Tensor) int {
	if len(x.shape) == 0 {
		panicf("LayerNorm: input is 0-dimensional")
	}
	D := x.shape[len(x.shape)-1]
	for _, p := range []*Tensor{w, b} {
		if p != nil && (len(p.shape) != 1 || p.shape[0] != D) {
			panicf("LayerNorm: parameter shape %v, want [%d] for input shape %v", p.shape, D, x.shape)
		}
	}
	return D
}

// LayerNormStats is LayerNorm with the row statistics returned as [rows]
// tensors on x's device (rows: the product of x's leading dimensions), the
// form that works on every device; on the CPU they view LayerNorm's
// slices.
func LayerNormStats(x, w, b *Tensor, eps float64) (y, mean, rstd *Tensor) {
	if x.buf == nil && (w == nil || w.buf == nil) && (b == nil || b.buf == nil) {
		y, m, r := LayerNorm(x, w, b, eps)
		return y, FromSlice(m, len(m)), FromSlice(r, len(r))
	}
	layerNormCheck(x, w, b)
	dev, be := deviceOf("LayerNorm", x, w, b)
	rows := 1
	for _, s := range x.shape[:len(x.shape)-1] {
		rows *= s
	}
	y, mean, rstd = NewOn(dev, x.shape...), NewOn(dev, rows), NewOn(dev, rows)
	if x.Len() > 0 {
		be.LayerNorm(y, mean, rstd, x, w, b, eps)
	}
	return y, mean, rstd
}

// LayerNormStatsBackward is LayerNormBackward with LayerNormStats's
// statistics.
func LayerNormStatsBackward(dy, x, w, mean, rstd *Tensor) (dx, dw, db *Tensor) {
	if dy.buf == nil && x.buf == nil && (w == nil || w.buf == nil) && mean.buf == nil && rstd.buf == nil {
		return LayerNormBackward(dy, x, w, mean.Data(), rstd.Data())
	}
	if !dy.SameShape(x) {
		panicf("LayerNormBackward: gradient shape %v, input shape %v", dy.shape, x.shape)
	}
	dev, be := deviceOf("LayerNormBackward", dy, x, w, mean, rstd)
	dx = NewOn(dev, x.shape...)
	if w != nil {
		dw, db = NewOn(dev, w.shape...), NewOn(dev, w.shape...)
	}
	be.LayerNormBackward(dx, dw, db, dy, x, w, mean, rstd)
	return dx, dw, db
}
