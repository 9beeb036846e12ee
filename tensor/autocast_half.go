package tensor

import (
	"math"

	"github.com/cohortml/cohort/tensor/internal/gemm"
)

// Half is a host matrix rounded to bfloat16, row-major and contiguous: an
// operand of autocast products that is rounded once and read by several
// of them (a weight by the forward product and the input gradient's, an
// activation by the forward product and the weight gradient's). Its
// storage comes from a free list of its own and goes back to it on
// Release, so a training step rounds into the same buffers every step.
//
// A Half is read-only once made and may be read by several goroutines;
// Release must be its last use.
type Half struct {
	bits       []uint16
	rows, cols int
}

// Rows and Cols are the matrix's shape.
func (h *Half) Rows() int { return h.rows }
func (h *Half) Cols() int { return h.cols }

// halfSpare holds bfloat16 storage handed back by Half.Release, by
// element count (the invariant of spare, recycle.go, holds for it).
var halfSpare = freeList[uint16]{free: map[int][][]uint16{}, maxElems: halfSpareMaxElems}

const halfSpareMaxElems = 32 << 20 // 64 MiB

func takeHalf(n int) []uint16 {
	if s := halfSpare.take(n); s != nil {
		return s
	}
	return make([]uint16, n)
}

// Release hands h's storage back for reuse by a later RoundBF16; h must
// not be used again. Releasing nil does nothing.
func (h *Half) Release() {
	if h == nil || h.bits == nil {
		return
	}
	s := h.bits
	h.bits = nil // a use after Release panics
	halfSpare.put(s)
}

// RoundBF16 returns t rounded to bfloat16 (round to nearest even, as
// gemm.BF16): t seen as a matrix of its last dimension's columns and
// every other dimension folded into rows. t must be on the host; a
// non-contiguous t is read through a contiguous copy.
func RoundBF16(t *Tensor) *Half {
	if t.buf != nil {
		panicf("RoundBF16: bfloat16 operands are rounded on the host; got a %v tensor", t.Device())
	}
	if len(t.shape) == 0 {
		panicf("RoundBF16: a scalar is not a matrix")
	}
	cols := t.shape[len(t.shape)-1]
	n := t.Len()
	rows := 0
	if cols > 0 {
		rows = n / cols
	}
	h := &Half{bits: takeHalf(n), rows: rows, cols: cols}
	if n == 0 {
		return h
	}
	src := t
	if !t.IsContiguous() {
		src = t.Contiguous()
	}
	d := src.Data()
	// Large tensors are rounded by the GEMM's threads, in chunks of whole
	// vectors.
	parallelRanges(n, 1<<14, 64, func(lo, hi int) { gemm.ToBF16(h.bits[lo:hi], d[lo:hi]) })
	return h
}

// GemmHalf computes dst = alpha·(op(a) @ op(b)) + beta·dst for bfloat16
// matrices a and b (op transposes when trans is set) into the contiguous
// float32 matrix dst [rows, cols], accumulating in float32 (gemm.GemmBF16;
// the bound is GemmAs's). dst must be on the host; with beta 0 its
// contents are ignored.
func GemmHalf(dst *Tensor, a *Half, transA bool, b *Half, transB bool, alpha, beta float32) {
	m, k := a.rows, a.cols
	if transA {
		m, k = k, m
	}
	kb, n := b.rows, b.cols
	if transB {
		kb, n = n, kb
	}
	if k != kb || len(dst.shape) != 2 || dst.shape[0] != m || dst.shape[1] != n || !dst.IsContiguous() || dst.buf != nil {
		panicf("GemmHalf: [%d %d] @ [%d %d] (transposed %v, %v) into %v %v tensor of shape %v (contiguous: %v): want a contiguous host [%d %d]",
			a.rows, a.cols, b.rows, b.cols, transA, transB, dst.Device(), dst.DType(), dst.shape, dst.IsContiguous(), m, n)
	}
	if dst.Len() == 0 {
		return
	}
	gemm.GemmBF16(transA, transB, m, n, k, alpha, a.bits, max(a.cols, 1), b.bits, max(b.cols, 1), beta, dst.Data(), n)
}

// LinearHalf is LinearAs(BFloat16, …) on operands already rounded: h =
// x·wᵀ + b + r for x [rows, in] and w [out, in] in bfloat16, then act (y
// for GELU, as LinearInto), the bias, residual and activation in float32.
func LinearHalf(h *Tensor, x, w *Half, b, r, y *Tensor, act Activation) {
	if x.cols != w.cols || len(h.shape) != 2 || h.shape[0] != x.rows || h.shape[1] != w.rows ||
		b != nil && (len(b.shape) != 1 || b.shape[0] != w.rows) || r != nil && !r.SameShape(h) ||
		(act == GELUTanhAct) != (y != nil) || y != nil && (!y.SameShape(h) || !y.IsContiguous()) {
		panicf("LinearHalf: shapes h %v, x [%d %d], w [%d %d]: want [rows, out], [rows, in], [out, in], with bias [out], residual [rows, out] and, for GELU only, y [rows, out]", h.shape, x.rows, x.cols, w.rows, w.cols)
	}
	if h.buf != nil || b != nil && b.buf != nil || r != nil && r.buf != nil || y != nil && y.buf != nil {
		panicf("LinearHalf: bfloat16 products run on the host; got a %v tensor", h.Device())
	}
	n := h.shape[1]
	if h.Len() == 0 {
		return
	}
	hd := h.Data()
	// As LinearInto: the bias and the residual added to each block of h
	// as the GEMM finishes it, then the activation, while it is in cache.
	var yd []float32
	if y != nil {
		yd = y.Data()
	}
	add, then := linearAddends(b, r, n), activationEpilogue(act, hd, yd, n)
	gemm.GemmBF16Fused(false, true, x.rows, n, x.cols, 1, x.bits, max(x.cols, 1), w.bits, max(w.cols, 1), 0, hd, n, add, then)
}

// AttentionQKVAs is AttentionQKV with its two products per head, q·kᵀ and
// p·v, in dt (see GemmAs): for BFloat16 qkv is rounded once and each
// head's probabilities as they are used, the softmax runs in float32, and
// y and p are float32. Float32 is AttentionQKV. Host tensors only for
// BFloat16.
func AttentionQKVAs(dt DType, qkv *Tensor, nHead int, causal bool) (y, p *Tensor) {
	if checkAutocastDType("AttentionQKVAs", dt) {
		return AttentionQKV(qkv, nHead, causal)
	}
	B, T, d, hd := attentionQKVDims("AttentionQKVAs", qkv, nHead)
	if qkv.buf != nil {
		panicf("AttentionQKVAs: bfloat16 products run on the host; got a %v tensor", qkv.Device())
	}
	if B*T*d == 0 {
		return New(B, T, d), New(B, nHead, T, T)
	}
	y, p = Empty(B, T, d), Empty(B, nHead, T, T)
	scale := float32(1 / math.Sqrt(float64(hd)))
	q16 := RoundBF16(qkv)
	defer q16.Release()
	qb, yd, pd := q16.bits, y.Data(), p.Data()
	m := mathKernels()
	parallelRanges(B, 1, 1, func(lo, hi int) {
		p16 := takeHalf(T * T)
		defer (&Half{bits: p16}).Release()
		for at := range attentionHeads(lo, hi, T, d, hd, nHead) {
			q, k, v := qb[at.q:], qb[at.k:], qb[at.v:]
			ph := pd[at.p:][:T*T]
			gemm.GemmBF16(false, true, T, T, hd, scale, q, 3*d, k, 3*d, 0, ph, T)
			m.SoftmaxRows(ph, T, causal)
			gemm.ToBF16(p16, ph)
			gemm.GemmBF16(false, false, T, hd, T, 1, p16, T, v, 3*d, 0, yd[at.y:], d)
		}
	})
	return y, p
}

// AttentionQKVBackwardAs is AttentionQKVBackward with its four products
// per head (dv = pᵀ·g, dp = g·vᵀ, dq = ds·k, dk = dsᵀ·q) in dt; the
// softmax gradient runs in float32. Float32 is AttentionQKVBackward.
func AttentionQKVBackwardAs(dt DType, dy, qkv, p *Tensor, nHead int, causal bool) *Tensor {
	if checkAutocastDType("AttentionQKVBackwardAs", dt) {
		return AttentionQKVBackward(dy, qkv, p, nHead, causal)
	}
	B, T, d, hd := attentionQKVDims("AttentionQKVBackwardAs", qkv, nHead)
	if len(dy.shape) != 3 || dy.shape[0] != B || dy.shape[1] != T || dy.shape[2] != d ||
		len(p.shape) != 4 || p.shape[0] != B || p.shape[1] != nHead || p.shape[2] != T || p.shape[3] != T {
		panicf("AttentionQKVBackwardAs: gradient shape %v, probabilities %v for qkv %v and %d heads", dy.shape, p.shape, qkv.shape, nHead)
	}
	if dy.buf != nil || qkv.buf != nil || p.buf != nil {
		panicf("AttentionQKVBackwardAs: bfloat16 products run on the host; got %v, %v and %v tensors", dy.Device(), qkv.Device(), p.Device())
	}
	if B*T*d == 0 {
		return New(qkv.shape...)
	}
	dqkv := Empty(qkv.shape...)
	scale := float32(1 / math.Sqrt(float64(hd)))
	q16, g16 := RoundBF16(qkv), RoundBF16(dy)
	defer q16.Release()
	defer g16.Release()
	qb, gb, pd, dd := q16.bits, g16.bits, p.Contiguous().Data(), dqkv.Data()
	m := mathKernels()
	parallelRanges(B, 1, 1, func(lo, hi int) {
		ds := Empty(T, T)
		defer Recycle(ds)
		dsd := ds.Data()
		p16, s16 := &Half{bits: takeHalf(T * T)}, &Half{bits: takeHalf(T * T)}
		defer p16.Release()
		defer s16.Release()
		for at := range attentionHeads(lo, hi, T, d, hd, nHead) {
			q, k, v := qb[at.q:], qb[at.k:], qb[at.v:]
			dq, dk, dv := dd[at.q:], dd[at.k:], dd[at.v:]
			g := gb[at.y:]
			ph := pd[at.p:][:T*T]
			gemm.ToBF16(p16.bits, ph)
			gemm.GemmBF16(true, false, T, hd, T, 1, p16.bits, T, g, d, 0, dv, 3*d) // dv = pᵀ·g
			gemm.GemmBF16(false, true, T, T, hd, 1, g, d, v, 3*d, 0, dsd, T)       // dp = g·vᵀ
			m.SoftmaxGradRows(dsd, ph, T, causal, scale)
			gemm.ToBF16(s16.bits, dsd)
			gemm.GemmBF16(false, false, T, hd, T, 1, s16.bits, T, k, 3*d, 0, dq, 3*d) // dq = ds·k
			gemm.GemmBF16(true, false, T, hd, T, 1, s16.bits, T, q, 3*d, 0, dk, 3*d)  // dk = dsᵀ·q
		}
	})
	return dqkv
}

// MatMulAs is MatMul with the products in dt (see GemmAs): batch
// dimensions broadcast as MatMul's, each matrix of the batch one bfloat16
// product. Float32 is MatMul. Host tensors only for BFloat16.
func MatMulAs(dt DType, a, b *Tensor) *Tensor {
	if checkAutocastDType("MatMulAs", dt) {
		return MatMul(a, b)
	}
	batch, m, k, n := matmulShape("MatMulAs", a, b)
	if a.buf != nil || b.buf != nil {
		panicf("MatMulAs: bfloat16 products run on the host; got %v and %v tensors", a.Device(), b.Device())
	}
	out := Empty(append(cloneInts(batch), m, n)...)
	if len(batch) == 0 {
		GemmAs(dt, out, a, b, 1, 0)
		return out
	}
	// Each operand broadcast to the whole batch and made contiguous, then
	// one product per matrix.
	ae := a.Expand(append(cloneInts(batch), m, k)...).Contiguous().Data()
	be := b.Expand(append(cloneInts(batch), k, n)...).Contiguous().Data()
	od := out.Data()
	for i := 0; i < out.Len()/max(m*n, 1); i++ {
		gemm.GemmMixed(false, false, m, n, k, 1, gemm.F32Operand(ae[i*m*k:]), max(k, 1), gemm.F32Operand(be[i*k*n:]), max(n, 1), 0, od[i*m*n:], max(n, 1), nil, nil)
	}
	return out
}

// checkAutocastDType reports whether dt is Float32 (the float32 op runs)
// and panics for a dtype other than Float32 and BFloat16.
func checkAutocastDType(op string, dt DType) bool {
	switch dt {
	case Float32:
		return true
	case BFloat16:
		return false
	}
	panicf("%s: dtype %v: want float32 or bfloat16", op, dt)
	return false
}

// Float32 returns h widened to a new float32 tensor [rows, cols]: the
// values h holds, exactly.
func (h *Half) Float32() *Tensor {
	t := New(h.rows, h.cols)
	if len(h.bits) > 0 {
		gemm.FromBF16(t.Data(), h.bits)
	}
	return t
}
