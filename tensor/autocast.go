package tensor

import (
	"github.com/cohortml/cohort/tensor/internal/gemm"
)

// Autocast: the products of a layer in bfloat16, its tensors in float32.
//
// PyTorch's torch.autocast(dtype=torch.bfloat16) runs matmul and linear
// on operands rounded to bfloat16, accumulating in float32, while the
// master weights, the gradients they receive and everything else
// (softmax, norms, losses, the optimizer) stay float32. GemmAs, LinearAs
// and LinearBackwardAs are those products here: float32 tensors in and
// out, the operands rounded (round to nearest even) to the DType given
// just for the product, so a model switches by passing BFloat16 instead of
// Float32 and nothing else changes. Float32 is the float32 op, bit for
// bit. The error bound of the bfloat16 product is gemm's (gemm_bf16.go):
// against the float32 product, (2⁻⁷ + 2⁻¹⁶ + γ_{k+2})·|alpha|·Σ|a||b| plus
// γ_{k+2}·|beta·dst|, with γ_n ≈ n·2⁻²⁴.

// GemmAs computes dst = alpha·(a @ b) + beta·dst as Gemm does, with a and
// b rounded to dt for the product when dt is BFloat16 (float32
// accumulation, dst float32). It takes plain matrices (2-D operands, any
// layout gemm reads in place or after a copy) on the host; a batch, or a
// device tensor, panics, as does a dt other than Float32 and BFloat16.
func GemmAs(dt DType, dst, a, b *Tensor, alpha, beta float32) {
	switch dt {
	case Float32:
		Gemm(dst, a, b, alpha, beta)
		return
	case BFloat16:
	default:
		panicf("GemmAs: dtype %v: want float32 or bfloat16", dt)
	}
	if len(a.shape) != 2 || len(b.shape) != 2 {
		panicf("GemmAs: bfloat16 products take matrices, got shapes %v and %v", a.shape, b.shape)
	}
	_, m, k, n := matmulShape("GemmAs", a, b)
	if len(dst.shape) != 2 || dst.shape[0] != m || dst.shape[1] != n || !dst.IsContiguous() {
		panicf("GemmAs: destination shape %v (contiguous: %v), want contiguous [%d %d] for %v @ %v", dst.shape, dst.IsContiguous(), m, n, a.shape, b.shape)
	}
	if dst.buf != nil || a.buf != nil || b.buf != nil {
		panicf("GemmAs: bfloat16 products run on the host; got %v, %v and %v tensors", dst.Device(), a.Device(), b.Device())
	}
	if dst.Len() == 0 {
		return
	}
	aa, ta, lda := matOperand(a)
	bb, tb, ldb := matOperand(b)
	// The operands are rounded block by block as the product packs them.
	gemm.GemmMixed(ta, tb, m, n, k, alpha, gemm.F32Operand(aa.storage[aa.offset:]), lda, gemm.F32Operand(bb.storage[bb.offset:]), ldb, beta, dst.Data(), n, nil, nil)
}

// LinearAs is LinearInto with the product x·wᵀ in dt (see GemmAs): h =
// x·wᵀ + b + r, then act, the bias, the residual and the activation in
// float32 (LinearHalf on x and w rounded). Float32 is LinearInto.
// Host tensors only for BFloat16.
func LinearAs(dt DType, h, x, w, b, r, y *Tensor, act Activation) {
	if dt == Float32 {
		LinearInto(h, x, w, b, r, y, act)
		return
	}
	if len(x.shape) != 2 || len(w.shape) != 2 || x.shape[1] != w.shape[1] || len(h.shape) != 2 ||
		h.shape[0] != x.shape[0] || h.shape[1] != w.shape[0] || !h.IsContiguous() ||
		b != nil && (len(b.shape) != 1 || b.shape[0] != h.shape[1]) ||
		r != nil && !r.SameShape(h) ||
		(act == GELUTanhAct) != (y != nil) || y != nil && (!y.SameShape(h) || !y.IsContiguous()) {
		panicf("LinearAs: shapes h %v, x %v, w %v: want [rows, out], [rows, in], [out, in], with bias [out], residual [rows, out] and, for GELU only, y [rows, out]", h.shape, x.shape, w.shape)
	}
	x16, w16 := RoundBF16(x), RoundBF16(w)
	LinearHalf(h, x16, w16, b, r, y, act)
	x16.Release()
	w16.Release()
}

// LinearBackwardAs returns the gradients of h = x·wᵀ + b for the output
// gradient dy [rows, out], x [rows, in] and w [out, in], the two products
// in dt (see GemmAs): dx = dy·w (nil unless needInput), dw = dyᵀ·x, and
// db = dy summed over rows, in float32. Float32 runs the float32 products.
func LinearBackwardAs(dt DType, dy, x, w *Tensor, needInput bool) (dx, dw, db *Tensor) {
	if len(dy.shape) != 2 || len(x.shape) != 2 || len(w.shape) != 2 ||
		dy.shape[0] != x.shape[0] || dy.shape[1] != w.shape[0] || x.shape[1] != w.shape[1] {
		panicf("LinearBackwardAs: shapes dy %v, x %v, w %v: want [rows, out], [rows, in], [out, in]", dy.shape, x.shape, w.shape)
	}
	rows, out, in := x.shape[0], w.shape[0], x.shape[1]
	if needInput {
		dx = Empty(rows, in)
		GemmAs(dt, dx, dy, w, 1, 0)
	}
	dw = Empty(out, in)
	GemmAs(dt, dw, dy.T(), x, 1, 0)
	db = New(out)
	dbd, dyc := db.Data(), dy.Contiguous().Data()
	for i := 0; i < rows; i++ {
		row := dyc[i*out : (i+1)*out]
		for j, v := range row {
			dbd[j] += v
		}
	}
	return dx, dw, db
}
