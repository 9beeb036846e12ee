package autograd

import (
	"fmt"
	"slices"

	"github.com/cohortml/cohort/tensor"
)

// MatMul returns the matrix product of a [..., m, k] and b [..., k, n]
// (batch dimensions broadcast, as tensor.MatMul). Gradients are computed
// with transposed views, never materialised transposes.
func MatMul(a, b *Var) *Var {
	av, bv := a.Value, b.Value
	if dt := castOf(av.Device(), a, b); dt != tensor.Float32 {
		return matMulAs(dt, a, b)
	}
	return record("MatMul", tensor.MatMul(av, bv), []*Var{a, b}, func(g *tensor.Tensor, s *sink) {
		if s.need(0) {
			// da = g @ bᵀ, summed over batch dimensions a was broadcast along.
			da := tensor.MatMul(g, bv.Transpose(-1, -2))
			r, _ := reduceTo(da, av.Shape())
			s.add(0, r, true)
		}
		if s.need(1) {
			if bv.Dims() == 2 && av.Dims() > 2 {
				// One product over the folded batch: db = a2ᵀ @ g2.
				k, n := bv.Dim(0), bv.Dim(1)
				gemmInto(s, 1, av.Reshape(-1, k).T(), g.Reshape(-1, n))
				return
			}
			db := tensor.MatMul(av.Transpose(-1, -2), g)
			r, _ := reduceTo(db, bv.Shape())
			s.add(1, r, true)
		}
	})
}

// matMulAs is MatMul under autocast (see Autocast): the product and both
// gradient products in dt.
func matMulAs(dt tensor.DType, a, b *Var) *Var {
	av, bv := a.Value, b.Value
	return record("MatMul", tensor.MatMulAs(dt, av, bv), []*Var{a, b}, func(g *tensor.Tensor, s *sink) {
		if s.need(1) {
			db := tensor.MatMulAs(dt, av.Transpose(-1, -2), g)
			r, _ := reduceTo(db, bv.Shape())
			s.add(1, r, true)
		}
		if s.need(0) {
			da := tensor.MatMulAs(dt, g, bv.Transpose(-1, -2))
			r, _ := reduceTo(da, av.Shape())
			s.add(0, r, true)
		}
	})
}

// gemmInto delivers a @ b as input i's gradient, accumulating straight
// into the leaf's Grad when the sink allows it.
func gemmInto(s *sink, i int, a, b *tensor.Tensor) {
	if dst, overwrite := s.into(i); dst != nil {
		beta := float32(1)
		if overwrite {
			beta = 0
		}
		tensor.Gemm(dst, a, b, 1, beta)
		s.settle(i)
		return
	}
	s.add(i, tensor.MatMul(a, b), true)
}

// Linear returns x @ wᵀ + b for x [..., in], weight w [out, in] (PyTorch's
// layout) and bias b [out] (nil for none): one GEMM with the bias folded
// in, over all leading dimensions of x at once.
func Linear(x, w, b *Var) *Var { return linear("Linear", nil, x, w, b, actNone) }

// LinearReLU returns max(Linear(x, w, b), 0) as one op: the ReLU is applied
// in place to the product and its gradient mask to the output gradient, so
// no pre-activation tensor is kept. Values and gradients equal those of
// Linear followed by ReLU.
func LinearReLU(x, w, b *Var) *Var { return linear("LinearReLU", nil, x, w, b, actReLU) }

// LinearGELUTanh returns GELUTanh(Linear(x, w, b)) as one op: the bias is
// folded into the GEMM and the activation is one vectorised pass over its
// output; the backward pass turns the output gradient into the
// pre-activation's in one pass, from the kept pre-activation (nothing else
// is saved). Values and gradients equal those of Linear followed by
// GELUTanh.
func LinearGELUTanh(x, w, b *Var) *Var {
	return linear("LinearGELUTanh", nil, x, w, b, actGELUTanh)
}

// AddLinear returns r + Linear(x, w, b), the residual connection around a
// projection, as one op: the product accumulates into a copy of r with
// the bias added in the same pass, and r's gradient is the output
// gradient itself (no copy). r must have the shape of Linear's output.
func AddLinear(r, x, w, b *Var) *Var { return linear("AddLinear", r, x, w, b, actNone) }

// activation is the elementwise function a linear op applies to its
// product.
type activation uint8

const (
	actNone activation = iota
	actReLU
	actGELUTanh
)

// linear is Linear, LinearReLU, LinearGELUTanh and (with a residual r)
// AddLinear. Inputs are recorded as [x, w, b?, r?].
func linear(op string, r, x, w, b *Var, act activation) *Var {
	xv, wv := x.Value, w.Value
	if wv.Dims() != 2 || xv.Dims() == 0 || xv.Dim(-1) != wv.Dim(1) {
		panic(fmt.Sprintf("autograd: %s: input shape %v, weight shape %v (want [..., %d] and [out, in])", op, xv.Shape(), wv.Shape(), lastDim(xv)))
	}
	out, in := wv.Dim(0), wv.Dim(1)
	if b != nil && (b.Value.Dims() != 1 || b.Value.Dim(0) != out) {
		panic(fmt.Sprintf("autograd: %s: bias shape %v, want [%d]", op, b.Value.Shape(), out))
	}
	x2 := xv.Reshape(-1, in)
	rows := x2.Dim(0)
	yShape := append(append([]int(nil), xv.Shape()[:xv.Dims()-1]...), out)
	if r != nil && !slices.Equal(r.Value.Shape(), yShape) {
		panic(fmt.Sprintf("autograd: %s: residual shape %v, want %v", op, r.Value.Shape(), yShape))
	}
	dt := castOf(xv.Device(), x, w)
	// h2 is written whole by the GEMM; its bias, residual and activation
	// are added in the GEMM's epilogue, block by block.
	h2 := tensor.EmptyOn(xv.Device(), rows, out) // the pre-activation, kept for GELU's gradient
	var rv, bv, y2 *tensor.Tensor
	if r != nil {
		rv = r.Value.Reshape(rows, out)
	}
	if b != nil {
		bv = b.Value
	}
	tact := tensor.Identity
	switch act {
	case actReLU:
		tact = tensor.ReLUAct
	case actGELUTanh:
		tact, y2 = tensor.GELUTanhAct, tensor.EmptyOn(xv.Device(), rows, out)
	}
	// Under bfloat16 autocast x and w are rounded once here and the
	// rounded copies kept for the backward products (with g's, rounded
	// once for both); all three go back to their free list after the
	// last of them.
	var x16, w16, g16 *tensor.Half
	if dt == tensor.BFloat16 {
		x16, w16 = tensor.RoundBF16(x2), tensor.RoundBF16(wv)
		tensor.LinearHalf(h2, x16, w16, bv, rv, y2, tact)
	} else {
		tensor.LinearInto(h2, x2, wv, bv, rv, y2, tact)
	}
	if y2 == nil {
		y2 = h2
	}
	inputs := []*Var{x, w}
	bi, ri := -1, -1
	if b != nil {
		bi = len(inputs)
		inputs = append(inputs, b)
	}
	if r != nil {
		ri = len(inputs)
		inputs = append(inputs, r)
	}
	var gh *tensor.Tensor // GELU's pre-activation gradient, written over h2; ReLU's when split
	v := record(op, y2.Reshape(yShape...), inputs, func(g *tensor.Tensor, s *sink) {
		g2 := g.Reshape(-1, out)
		biasDone := false
		switch act {
		case actReLU:
			switch {
			case gh != nil: // BackwardSplit's weight pass
				g2 = gh
			case ri < 0 && s.gradPrivate():
				g2 = tensor.ReLUBackwardInto(g2, g2, y2) // g is the engine's and dead after this call
			case s.deferring():
				// Kept for the weight pass, then recycled with the node.
				gh = tensor.ReLUBackwardInto(tensor.EmptyOn(g2.Device(), g2.Shape()...), g2, y2)
				s.n.scratch, g2 = gh, gh
			default:
				g2 = tensor.ReLUBackward(g2, y2)
			}
		case actGELUTanh:
			// h2 is needed only for this; BackwardSplit's weight pass runs
			// the function again with the same g and reuses gh.
			if gh == nil {
				// The bias gradient, when this pass needs it, is summed
				// block by block as the gradient is made.
				if bi >= 0 && s.need(bi) {
					biasGrad(s, bi, out, func(db *tensor.Tensor) { gh = tensor.GELUTanhBackwardSumInto(h2, g2, h2, db) })
					biasDone = true
				} else {
					gh = tensor.GELUTanhBackwardInto(h2, g2, h2)
				}
			}
			g2 = gh
		}
		if ri >= 0 && s.need(ri) {
			s.lend(ri, g) // the residual's gradient is g itself, read below
		}
		if dt == tensor.BFloat16 && g16 == nil && (s.need(0) || s.need(1)) {
			g16 = tensor.RoundBF16(g2)
		}
		if s.need(1) {
			if dt == tensor.BFloat16 {
				halfInto(s, 1, g16, true, x16, false, out, wv.Dim(1)) // dw = gᵀ @ x
			} else {
				gemmInto(s, 1, g2.T(), x2) // dw = gᵀ @ x
			}
		}
		if bi >= 0 && s.need(bi) && !biasDone {
			biasGrad(s, bi, out, func(db *tensor.Tensor) { tensor.SumInto(db, g2) })
		}
		if s.need(0) {
			var dx *tensor.Tensor
			if dt == tensor.BFloat16 {
				dx = tensor.Empty(rows, wv.Dim(1))
				tensor.GemmHalf(dx, g16, false, w16, false, 1, 0) // dx = g @ w
			} else {
				dx = tensor.MatMul(g2, wv) // dx = g @ w
			}
			s.add(0, dx.Reshape(xv.Shape()...), true)
		}
		if dt == tensor.BFloat16 && !s.deferring() {
			// BackwardSplit's input pass (deferring) leaves them to its
			// weight pass.
			x16.Release()
			w16.Release()
			g16.Release()
		}
	})
	if v.node == nil {
		x16.Release()
		w16.Release()
	}
	if v.node != nil {
		v.node.own = y2 // fresh storage: the output (GELU's, when there is one)
		if act == actGELUTanh {
			v.node.scratch = h2 // the pre-activation, then its gradient: read by nothing else
		}
	}
	return v
}

// biasGrad delivers the gradient of input bi, a bias of out values, that
// sum adds onto the tensor it is given: the leaf's Grad in place (cleared
// first when it holds no gradient yet), or else a fresh zero tensor.
func biasGrad(s *sink, bi, out int, sum func(db *tensor.Tensor)) {
	if dst, overwrite := s.into(bi); dst != nil {
		if overwrite {
			dst.Zero()
		}
		sum(dst)
		s.settle(bi)
		return
	}
	db := tensor.NewOn(s.n.inputs[bi].Value.Device(), out)
	sum(db)
	s.add(bi, db, true)
}

func lastDim(t *tensor.Tensor) int {
	if t.Dims() == 0 {
		return 0
	}
	return t.Dim(-1)
}
