package tensor

import (
	"iter"
	"math"
	"sync"

	"github.com/cohortml/cohort/tensor/internal/gemm"
	"github.com/cohortml/cohort/tensor/internal/vec"
)

// Fused kernels of the transformer block: GELU-tanh and its gradient,
// multi-head attention read straight out of the fused qkv projection,
// softmax rows for cross-entropy. They run on vec.Math: AVX2+FMA assembly
// where the CPU has it unless the GEMM configuration asks for the pure-Go
// path (COHORT_GEMM_KERNEL=go), so that one setting runs the whole
// portable path. Error bounds are stated in package vec (exp ≤ 2 ULP,
// GELU-tanh ≤ 4 ULP + 3·|2u| ULP) and apply to both paths.

// mathKernels is decided once, at the first call, when the GEMM reads its
// configuration.
var mathKernels = sync.OnceValue(func() vec.Math {
	g, err := gemm.Default()
	return vec.NewMath(err == nil && g.Kernel() == gemm.KernelGo)
})

// GELUTanhBackward returns dy·GELU-tanh′(x) for same-shaped dy and x.
func GELUTanhBackward(dy, x *Tensor) *Tensor {
	return GELUTanhBackwardInto(EmptyOn(x.Device(), x.shape...), dy, x) // written whole
}

// GELUTanhBackwardInto writes dy·GELU-tanh′(x) into dst (contiguous, x's
// shape; it may be dy or x) and returns dst.
func GELUTanhBackwardInto(dst, dy, x *Tensor) *Tensor {
	checkGELUTanhBackward(dst, dy, x)
	if dst.buf != nil || dy.buf != nil || x.buf != nil {
		_, be := deviceOf("GELUTanhBackward", dst, dy, x)
		be.GELUTanhBackward(dst, dy, x, nil)
		return dst
	}
	m, dd, gd, xd := mathKernels(), dst.Data(), dy.Contiguous().Data(), x.Contiguous().Data()
	parallelRanges(len(dd), elementwiseMin, 8, func(lo, hi int) { m.GELUTanhGrad(dd[lo:hi], gd[lo:hi], xd[lo:hi]) })
	return dst
}

func checkGELUTanhBackward(dst, dy, x *Tensor) {
	if !dy.SameShape(x) || !dst.SameShape(x) || !dst.IsContiguous() {
		panicf("GELUTanhBackward: shapes dst %v, gradient %v, input %v", dst.shape, dy.shape, x.shape)
	}
}

// GELUTanhBackwardSumInto is GELUTanhBackwardInto that also adds the
// column sums of the result, over the rows of its last dimension, onto db
// (contiguous, [n] for a last dimension of n): a linear layer's bias
// gradient, equal bit for bit to SumInto(db, dst) afterwards. Run on one
// thread, it sums each block of rows while the block is in cache instead
// of reading the whole result again.
func GELUTanhBackwardSumInto(dst, dy, x, db *Tensor) *Tensor {
	if len(x.shape) == 0 {
		panicf("GELUTanhBackwardSumInto: scalar input")
	}
	n := x.shape[len(x.shape)-1]
	if db.Len() != n || !db.IsContiguous() || db.shape[len(db.shape)-1] != n {
		panicf("GELUTanhBackwardSumInto: bias gradient shape %v for input %v", db.shape, x.shape)
	}
	if dst.buf != nil || dy.buf != nil || x.buf != nil || db.buf != nil {
		checkGELUTanhBackward(dst, dy, x)
		_, be := deviceOf("GELUTanhBackwardSumInto", dst, dy, x, db)
		be.GELUTanhBackward(dst, dy, x, db)
		return dst
	}
	if g, err := gemm.Default(); err != nil || g.Threads() > 1 && !serialOnly || n == 0 {
		SumInto(db, GELUTanhBackwardInto(dst, dy, x))
		return dst
	}
	checkGELUTanhBackward(dst, dy, x)
	if dst.buf != nil || dy.buf != nil || x.buf != nil {
		_, be := deviceOf("GELUTanhBackward", dst, dy, x)
		be.GELUTanhBackward(dst, dy, x, nil)
		return dst
	}
	m, dd, gd, xd, bd := mathKernels(), dst.Data(), dy.Contiguous().Data(), x.Contiguous().Data(), db.Data()
	rows := len(dd) / n
	step := max(1, 8192/n) // rows per block: 32 KiB of results
	for r := 0; r < rows; r += step {
		lo, hi := r*n, min(r+step, rows)*n
		m.GELUTanhGrad(dd[lo:hi], gd[lo:hi], xd[lo:hi])
		vec.SumRows(bd, dd[lo:hi], n, hi/n-r)
	}
	return dst
}

// Activation names the elementwise function LinearInto applies to a
// linear layer's output in its epilogue.
type Activation int

const (
	Identity    Activation = iota
	ReLUAct                // max(h, 0), in place
	GELUTanhAct            // GELU-tanh(h), into a separate y
)

// LinearInto is a linear layer's forward pass with its elementwise work
// fused into the product's epilogue: it writes
//
//	h = x·wᵀ + b + r
//
// for x [rows, in], w [out, in], h [rows, out] (contiguous, written
// whole), and the optional bias b [out] and residual r [rows, out] (nil
// when absent), adding the bias to the product first and the residual
// last, as PyTorch's r + addmm(b, x, wᵀ) rounds. Then act: ReLUAct rewrites h,
// GELUTanhAct writes GELU-tanh(h) into y (h's shape, contiguous) and
// leaves h, the pre-activation, for the gradient; y is nil otherwise.
//
// The GEMM adds the bias and the residual to each tile of h before it
// stores it (see gemm.Addends), and each block of h gets its activation
// right after the GEMM finishes it, while it is in cache, rather than in
// passes over the whole output before and after.
func LinearInto(h, x, w, b, r, y *Tensor, act Activation) {
	if len(x.shape) != 2 || len(w.shape) != 2 || x.shape[1] != w.shape[1] || len(h.shape) != 2 ||
		h.shape[0] != x.shape[0] || h.shape[1] != w.shape[0] || !h.IsContiguous() ||
		b != nil && (len(b.shape) != 1 || b.shape[0] != h.shape[1]) ||
		r != nil && !r.SameShape(h) ||
		(act == GELUTanhAct) != (y != nil) || y != nil && (!y.SameShape(h) || !y.IsContiguous()) {
		var ys, bs, rs []int
		if y != nil {
			ys = y.shape
		}
		if b != nil {
			bs = b.shape
		}
		if r != nil {
			rs = r.shape
		}
		panicf("LinearInto: shapes h %v, x %v, w %v, bias %v, residual %v, y %v for activation %d: want [rows, out], [rows, in], [out, in], [out], [rows, out] and, for GELU only, y [rows, out]", h.shape, x.shape, w.shape, bs, rs, ys, act)
	}
	if h.buf != nil || x.buf != nil || w.buf != nil || b != nil && b.buf != nil || r != nil && r.buf != nil || y != nil && y.buf != nil {
		_, be := deviceOf("LinearInto", h, x, w, b, r, y)
		be.Linear(h, x, w, b, r, y, act)
		return
	}
	n := h.shape[1]
	hd := h.Data()
	var yd []float32
	if y != nil {
		yd = y.Data()
	}
	// The bias and the residual are added by the GEMM as it stores each
	// tile (in the kernel where it can), the activation as each block is
	// finished.
	gemmThen(h, x, w.T(), 1, 0, linearAddends(b, r, n), activationEpilogue(act, hd, yd, n))
}

// linearAddends returns the GEMM addends of a linear layer's bias b and
// residual r (nil for none; r with row stride n), nil when neither.
func linearAddends(b, r *Tensor, n int) *gemm.Addends {
	if b == nil && r == nil {
		return nil
	}
	add := &gemm.Addends{LdMat: n}
	if b != nil {
		add.Row = b.Contiguous().Data()
	}
	if r != nil {
		add.Mat = r.Contiguous().Data()
	}
	return add
}

// activationEpilogue returns the GEMM epilogue that applies act to each
// finished block of hd (n columns) in place, GELUTanhAct keeping the
// pre-activation there and writing the activation into yd; nil for
// Identity.
func activationEpilogue(act Activation, hd, yd []float32, n int) gemm.Epilogue {
	if act == Identity {
		return nil
	}
	m := mathKernels()
	return func(r0, r1, c0, c1 int) {
		for i := r0 * n; i < r1*n; i += n {
			row := hd[i+c0 : i+c1]
			switch act {
			case ReLUAct:
				vec.ReLU(row, row)
			case GELUTanhAct:
				m.GELUTanh(yd[i+c0:i+c1], row)
			}
		}
	}
}

// attentionQKVDims checks qkv [B, T, 3d] for nHead heads.
func attentionQKVDims(name string, qkv *Tensor, nHead int) (B, T, d, hd int) {
	if len(qkv.shape) != 3 || nHead <= 0 || qkv.shape[2]%(3*nHead) != 0 || !qkv.IsContiguous() {
		panicf("%s: qkv shape %v (contiguous: %v) for %d heads, want contiguous [B, T, 3·d] with heads dividing d", name, qkv.shape, qkv.IsContiguous(), nHead)
	}
	B, T, d = qkv.shape[0], qkv.shape[1], qkv.shape[2]/3
	return B, T, d, d / nHead
}

// AttentionQKV is multi-head scaled dot-product attention over a fused
// projection qkv [B, T, 3·d]: features [0, d) are the queries, [d, 2d) the
// keys, [2d, 3d) the values, head h using features h·hd:(h+1)·hd of each
// (hd = d/nHead). It returns y [B, T, d], the heads' outputs concatenated
// in order, and p, what AttentionQKVBackward needs of the forward pass:
// on the CPU the attention probabilities [B, nHead, T, T]; on a device
// whatever its backend keeps (Backend.Attention: the CUDA backend keeps
// the log-sum-exp of each score row, [B, nHead, T]), to be handed back
// unchanged and read by nothing else. Scores are scaled by 1/√hd; with
// causal, query i sees keys j ≤ i only (p is 0 above the diagonal).
//
// The heads are read and written in place through strided GEMMs: no
// permuted copy of q, k, v or y is made.
func AttentionQKV(qkv *Tensor, nHead int, causal bool) (y, p *Tensor) {
	B, T, d, hd := attentionQKVDims("AttentionQKV", qkv, nHead)
	if qkv.buf != nil {
		dev, be := deviceOf("AttentionQKV", qkv)
		y = NewOn(dev, B, T, d)
		if B*T*d == 0 {
			return y, NewOn(dev, B, nHead, T, T)
		}
		p = be.Attention(y, qkv, nHead, causal)
		if p == nil || p.Device() != dev {
			panicf("AttentionQKV: the %v backend's forward pass saved no state on %v for its backward pass", dev, dev)
		}
		return y, p
	}
	if B*T*d == 0 {
		return New(B, T, d), New(B, nHead, T, T)
	}
	// Every element of both is written below (GEMMs with beta 0, the
	// softmax clearing the masked part of each row).
	y, p = Empty(B, T, d), Empty(B, nHead, T, T)
	scale := float32(1 / math.Sqrt(float64(hd)))
	qd, yd, pd := qkv.Data(), y.Data(), p.Data()
	m := mathKernels()
	// The sequences are independent: they share the GEMM's threads (each
	// head's products are too small to split).
	parallelRanges(B, 1, 1, func(lo, hi int) {
		for at := range attentionHeads(lo, hi, T, d, hd, nHead) {
			q, k, v := qd[at.q:], qd[at.k:], qd[at.v:]
			ph := pd[at.p:][:T*T]
			scores(causal, T, hd, scale, q, 3*d, k, 3*d, ph)
			m.SoftmaxRows(ph, T, causal)
			mulProbs(causal, false, T, hd, ph, v, 3*d, yd[at.y:], d) // y = p·v
		}
	})
	return y, p
}

// AttentionQKVBackward returns the gradient of AttentionQKV's qkv [B, T,
// 3d] given the output gradient dy [B, T, d], qkv, the p AttentionQKV
// returned (on the CPU the probabilities; on a device its backend's saved
// state) and the forward pass's causal (with it, the products with p and
// its gradient skip their zero upper triangles).
func AttentionQKVBackward(dy, qkv, p *Tensor, nHead int, causal bool) *Tensor {
	B, T, d, hd := attentionQKVDims("AttentionQKVBackward", qkv, nHead)
	if len(dy.shape) != 3 || dy.shape[0] != B || dy.shape[1] != T || dy.shape[2] != d ||
		(p.buf == nil && (len(p.shape) != 4 || p.shape[0] != B || p.shape[1] != nHead || p.shape[2] != T || p.shape[3] != T)) {
		panicf("AttentionQKVBackward: gradient shape %v, probabilities %v for qkv %v and %d heads", dy.shape, p.shape, qkv.shape, nHead)
	}
	if dy.buf != nil || qkv.buf != nil || p.buf != nil {
		dev, be := deviceOf("AttentionQKVBackward", dy, qkv, p)
		dqkv := NewOn(dev, qkv.shape...)
		if B*T*d > 0 {
			be.AttentionBackward(dqkv, dy, qkv, p, nHead, causal)
		}
		return dqkv
	}
	if B*T*d == 0 {
		return New(qkv.shape...)
	}
	dqkv := Empty(qkv.shape...) // dq, dk and dv of every head written with beta 0
	scale := float32(1 / math.Sqrt(float64(hd)))
	qd, gd, pd, dd := qkv.Data(), dy.Contiguous().Data(), p.Contiguous().Data(), dqkv.Data()
	m := mathKernels()
	parallelRanges(B, 1, 1, func(lo, hi int) {
		attentionQKVBackwardSeqs(m, lo, hi, T, d, hd, nHead, causal, scale, qd, gd, pd, dd)
	})
	return dqkv
}

// attentionQKVBackwardSeqs is AttentionQKVBackward for sequences [lo, hi).
func attentionQKVBackwardSeqs(m vec.Math, lo, hi, T, d, hd, nHead int, causal bool, scale float32, qd, gd, pd, dd []float32) {
	ds := make([]float32, T*T)
	for at := range attentionHeads(lo, hi, T, d, hd, nHead) {
		q, k, v := qd[at.q:], qd[at.k:], qd[at.v:]
		dq, dk, dv := dd[at.q:], dd[at.k:], dd[at.v:]
		g := gd[at.y:]
		ph := pd[at.p:][:T*T]
		mulProbs(causal, true, T, hd, ph, g, d, dv, 3*d) // dv = pᵀ·g
		scores(causal, T, hd, 1, g, d, v, 3*d, ds)       // dp = g·vᵀ
		// ds = p·(dp − Σ_j p·dp)·scale; the masked entries get 0.
		m.SoftmaxGradRows(ds, ph, T, causal, scale)
		mulProbs(causal, false, T, hd, ds, k, 3*d, dq, 3*d) // dq = ds·k
		mulProbs(causal, true, T, hd, ds, q, 3*d, dk, 3*d)  // dk = dsᵀ·q
	}
}

// scores writes alpha·a·bᵀ into c (T×T, contiguous) for a and b T×hd
// (row strides lda, ldb): attention's scores q·kᵀ and the gradient g·vᵀ
// of its probabilities. Under a causal mask only the lower triangle is
// computed; the softmax and its gradient mask everything above it.
func scores(causal bool, T, hd int, alpha float32, a []float32, lda int, b []float32, ldb int, c []float32) {
	if causal {
		gemm.SgemmLowerNT(T, hd, alpha, a, lda, b, ldb, c, T)
		return
	}
	gemm.Sgemm(false, true, T, T, hd, alpha, a, lda, b, ldb, 0, c, T)
}

// mulProbs writes op(a)·b into c (T×hd, row stride ldc) for attention's
// T×T probabilities or their gradient a (op(a) = aᵀ with transA) and b
// (T×hd, row stride ldb). Under a causal mask a is lower triangular: row i
// of a·b and row j of aᵀ·b need only a's columns or rows up to i or from
// j, and the product skips the zero triangle.
func mulProbs(causal, transA bool, T, hd int, a, b []float32, ldb int, c []float32, ldc int) {
	if causal {
		gemm.SgemmTriangular(transA, false, transA, T, hd, 1, a, T, b, ldb, 0, c, ldc)
		return
	}
	gemm.Sgemm(transA, false, T, hd, T, 1, a, T, b, ldb, 0, c, ldc)
}

// SoftmaxRows writes the softmax of each row of x [N, C] into dst [N, C]
// (contiguous; it may be x) and returns each row's log-sum-exp,
// log Σ_j exp(x_j), in float64. Rows of all −∞ give NaN probabilities, as
// PyTorch.
func SoftmaxRows(dst, x *Tensor) (lse []float64) {
	if len(x.shape) != 2 || !dst.SameShape(x) || !dst.IsContiguous() {
		panicf("SoftmaxRows: shapes dst %v, input %v, want contiguous [N, C] for both", dst.shape, x.shape)
	}
	if dst.buf != nil || x.buf != nil {
		unsupported("SoftmaxRows (its log-sum-exp is a host slice; CrossEntropy has a device form)", x.Device())
	}
	N, C := x.shape[0], x.shape[1]
	xd, dd := x.Contiguous().Data(), dst.Data()
	lse = make([]float64, N)
	m := mathKernels()
	parallelRanges(N, max(1, elementwiseMin/max(C, 1)), 1, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			row, out := xd[i*C:(i+1)*C], dd[i*C:(i+1)*C]
			mx := m.Max(row)
			if math.IsInf(float64(mx), -1) {
				mx = 0
			}
			sum := m.ExpShiftSum(out, row, 1, mx)
			m.Scale(out, out, 1/sum)
			lse[i] = float64(mx) + math.Log(float64(sum))
		}
	})
	return lse
}

// headAt holds the offsets of one head h of one sequence b of an
// attention over qkv [B, T, 3d] (hd = d/nHead features a head): of its
// queries, keys and values in qkv (and its gradient), of its output in y
// (and dy) [B, T, d], and of its probabilities in p [B, nHead, T, T].
type headAt struct{ q, k, v, y, p int }

// attentionHeads yields the heads of sequences [lo, hi) in order.
func attentionHeads(lo, hi, T, d, hd, nHead int) iter.Seq[headAt] {
	return func(yield func(headAt) bool) {
		for b := lo; b < hi; b++ {
			base := b * T * 3 * d
			for h := 0; h < nHead; h++ {
				q := base + h*hd
				if !yield(headAt{q: q, k: q + d, v: q + 2*d, y: b*T*d + h*hd, p: (b*nHead + h) * T * T}) {
					return
				}
			}
		}
	}
}
