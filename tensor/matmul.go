package tensor

import (
	"github.com/cohortml/cohort/tensor/internal/gemm"
	"slices"
)

// Matrix products all go through gemm.Sgemm. A transposed view (for
// example b.Transpose(-1, -2) or t.T()) is passed to Sgemm as a transpose
// flag, never copied.

// matLayout describes how gemm reads the last two dimensions (rows × cols)
// of t: row-major with leading dimension ld, or transposed (column-major)
// with leading dimension ld. ok is false for any other layout.
func matLayout(t *Tensor) (trans bool, ld int, ok bool) {
	nd := len(t.shape)
	rows, cols := t.shape[nd-2], t.shape[nd-1]
	rs, cs := t.strides[nd-2], t.strides[nd-1]
	if (cols <= 1 || cs == 1) && (rows <= 1 || rs >= cols) {
		ld = rs
		if rows <= 1 {
			ld = cols
		}
		return false, max(ld, 1), true
	}
	if (rows <= 1 || rs == 1) && (cols <= 1 || cs >= rows) {
		ld = cs
		if cols <= 1 {
			ld = rows
		}
		return true, max(ld, 1), true
	}
	return false, 0, false
}

// matOperand returns t, or a contiguous copy when gemm cannot read its last
// two dimensions in place, with its gemm layout.
func matOperand(t *Tensor) (*Tensor, bool, int) {
	if tr, ld, ok := matLayout(t); ok {
		return t, tr, ld
	}
	c := t.Clone()
	_, ld, _ := matLayout(c)
	return c, false, ld
}

// matmulShape checks a [..., m, k] @ b [..., k, n] and returns the batch
// shape (broadcast) and m, k, n.
func matmulShape(name string, a, b *Tensor) (batch []int, m, k, n int) {
	if len(a.shape) < 2 || len(b.shape) < 2 {
		panicf("%s: operands need at least 2 dimensions, got shapes %v and %v", name, a.shape, b.shape)
	}
	na, nb := len(a.shape), len(b.shape)
	m, k, n = a.shape[na-2], a.shape[na-1], b.shape[nb-1]
	if b.shape[nb-2] != k {
		panicf("%s: inner dimensions differ: shapes %v and %v", name, a.shape, b.shape)
	}
	batch, ok := BroadcastShapes(a.shape[:na-2], b.shape[:nb-2])
	if !ok {
		panicf("%s: batch dimensions of shapes %v and %v do not broadcast", name, a.shape, b.shape)
	}
	return batch, m, k, n
}

// MatMul returns the matrix product of a [..., m, k] and b [..., k, n]:
// a [..., m, n] tensor. Leading (batch) dimensions broadcast; both operands
// need at least two dimensions.
func MatMul(a, b *Tensor) *Tensor {
	batch, m, _, n := matmulShape("MatMul", a, b)
	if a.buf != nil || b.buf != nil {
		dev, _ := deviceOf("MatMul", a, b)
		out := NewOn(dev, append(batch, m, n)...)
		Gemm(out, a, b, 1, 0)
		return out
	}
	out := Empty(append(batch, m, n)...) // beta 0: Gemm writes every element
	Gemm(out, a, b, 1, 0)
	return out
}

// MatMulInto writes a @ b into dst and returns it (see MatMul).
func MatMulInto(dst, a, b *Tensor) *Tensor {
	Gemm(dst, a, b, 1, 0)
	return dst
}

// Gemm computes dst = alpha·(a @ b) + beta·dst with MatMul's shape rules.
// dst must be contiguous with shape [batch..., m, n] and must not overlap a
// or b. With beta 0, dst's old contents are ignored (NaNs included); with
// beta 1 the product accumulates into dst.
func Gemm(dst, a, b *Tensor, alpha, beta float32) { GemmThen(dst, a, b, alpha, beta, nil) }

// GemmThen is Gemm followed by an elementwise pass then over dst, seen as
// a matrix of rows [batch..., m] and n columns: then(r0, r1, c0, c1) may
// read and rewrite rows [r0, r1) and columns [c0, c1) of it, which hold
// their product when it is called. Each element is given to then once;
// rectangles of a product whose operands are plain matrices (or a batch
// folded into rows) are given as soon as they are computed, while still
// in cache, possibly on several goroutines at once.
func GemmThen(dst, a, b *Tensor, alpha, beta float32, then func(r0, r1, c0, c1 int)) {
	gemmThen(dst, a, b, alpha, beta, nil, then)
}

// gemmThen is GemmThen with addends added to the product before then sees
// it (see gemm.Addends; add may be nil, and is refused with a batch that
// is not folded into rows).
func gemmThen(dst, a, b *Tensor, alpha, beta float32, add *gemm.Addends, then func(r0, r1, c0, c1 int)) {
	batch, m, k, n := matmulShape("Gemm", a, b)
	want := append(cloneInts(batch), m, n)
	if !slices.Equal(dst.shape, want) {
		panicf("Gemm: destination shape %v, want %v for %v @ %v", dst.shape, want, a.shape, b.shape)
	}
	if !dst.IsContiguous() {
		panicf("Gemm: destination of shape %v is not contiguous", dst.shape)
	}
	if dst.buf != nil || a.buf != nil || b.buf != nil {
		_, be := deviceOf("Gemm", dst, a, b)
		if add != nil || then != nil {
			panicf("GemmThen: an epilogue function runs on the host; %v tensors take Gemm", dst.Device())
		}
		if dst.Len() > 0 {
			be.Gemm(dst, a, b, alpha, beta)
		}
		return
	}
	if dst.Len() == 0 {
		return
	}
	c := dst.Data()
	if k == 0 {
		if beta == 0 {
			clear(c)
		} else {
			ScaleInto(dst, dst, beta)
		}
		if add != nil {
			// An empty product still gets its addends.
			gemm.SgemmFused(false, false, len(c)/n, n, 0, 1, nil, 0, nil, n, 1, c, n, add, nil)
		}
		if then != nil {
			then(0, len(c)/n, 0, n)
		}
		return
	}
	// A batched a times a plain matrix b: fold a's batch into its rows
	// when a is contiguous, making one large product.
	if len(b.shape) == 2 && len(a.shape) > 2 && a.IsContiguous() {
		rows := a.Len() / k
		bb, tb, ldb := matOperand(b)
		gemm.SgemmFused(false, tb, rows, n, k, alpha, a.Data(), k, bb.storage[bb.offset:], ldb, beta, c, n, add, then)
		return
	}
	aa, ta, lda := matOperand(a)
	bb, tb, ldb := matOperand(b)
	if len(batch) == 0 {
		gemm.SgemmFused(ta, tb, m, n, k, alpha, aa.storage[aa.offset:], lda, bb.storage[bb.offset:], ldb, beta, c, n, add, then)
		return
	}
	if add != nil {
		panicf("Gemm: addends with a batch of products")
	}
	if then != nil {
		defer then(0, len(c)/n, 0, n)
	}
	nbatch := 1
	for _, s := range batch {
		nbatch *= s
	}
	// Batch strides, broadcast over the common batch shape.
	full := func(t *Tensor) []int {
		nd := len(t.shape)
		st, _ := broadcastStrides(t.shape[:nd-2], t.strides[:nd-2], batch)
		return st
	}
	as, bs := full(aa), full(bb)
	idx := make([]int, len(batch))
	ao, bo := aa.offset, bb.offset
	for p := 0; p < nbatch; p++ {
		gemm.Sgemm(ta, tb, m, n, k, alpha, aa.storage[ao:], lda, bb.storage[bo:], ldb, beta, c[p*m*n:(p+1)*m*n], n)
		for d := len(batch) - 1; d >= 0; d-- {
			idx[d]++
			ao += as[d]
			bo += bs[d]
			if idx[d] < batch[d] {
				break
			}
			ao -= as[d] * batch[d]
			bo -= bs[d] * batch[d]
			idx[d] = 0
		}
	}
}
