package tensor

import (
	"math"
	"slices"

	"github.com/cohortml/cohort/tensor/internal/vec"
)

// Reductions. Sums accumulate each innermost run in float64, so long rows
// (a mean over a whole dataset) keep float32 round-off out of the result.

// SumInto adds to dst the sum of src over every dimension in which dst has
// size 1 (or which dst lacks): dst's shape must broadcast to src's shape.
// This is the reduction that undoes broadcasting, used by gradients.
func SumInto(dst, src *Tensor) *Tensor {
	ds, ok := broadcastStrides(dst.shape, dst.strides, src.shape)
	if !ok {
		panicf("SumInto: destination shape %v does not broadcast to source shape %v", dst.shape, src.shape)
	}
	if dst.buf != nil || src.buf != nil {
		_, be := deviceOf("SumInto", dst, src)
		be.Sum(dst, src)
		return dst
	}
	d, s := dst.storage, src.storage
	// A bias gradient: a contiguous [n] (or [1, …, 1, n]) summed over the
	// rows of a contiguous [..., n]. The rows are added one at a time, as
	// below, with the running sums in registers.
	if len(src.shape) > 1 && len(dst.shape) > 0 && dst.shape[len(dst.shape)-1] == src.shape[len(src.shape)-1] &&
		dst.Len() == dst.shape[len(dst.shape)-1] && dst.IsContiguous() && src.IsContiguous() && src.Len() > 0 {
		n := dst.Len()
		vec.SumRows(d[dst.offset:dst.offset+n], s[src.offset:], n, src.Len()/n)
		return dst
	}
	l := newLoop(src.shape, ds, src.strides)
	l.rows(dst.offset, src.offset, 0, func(o0, o1, _, n, s0, s1, _ int) {
		switch {
		case s0 == 0 && s1 == 1:
			var acc float64
			for _, v := range s[o1 : o1+n] {
				acc += float64(v)
			}
			d[o0] += float32(acc)
		case s0 == 0:
			var acc float64
			for i := 0; i < n; i++ {
				acc += float64(s[o1+i*s1])
			}
			d[o0] += float32(acc)
		case s0 == 1 && s1 == 1:
			vec.Add(d[o0:o0+n], s[o1:o1+n]) // bit-for-bit the scalar sum
		default:
			for i := 0; i < n; i++ {
				d[o0+i*s0] += s[o1+i*s1]
			}
		}
	})
	return dst
}

// SumTo returns the sum of src over the dimensions that broadcasting shape
// to src's shape would repeat; the result has the given shape.
func SumTo(src *Tensor, shape ...int) *Tensor {
	if slices.Equal(shape, src.shape) {
		return src.Clone()
	}
	return SumInto(NewOn(src.Device(), shape...), src)
}

// Sum returns the sum of all elements as a 0-dimensional tensor.
func Sum(a *Tensor) *Tensor { return SumInto(NewOn(a.Device()), a) }

// Mean returns the mean of all elements as a 0-dimensional tensor (NaN for
// an empty tensor).
func Mean(a *Tensor) *Tensor {
	s := Sum(a)
	if s.buf != nil {
		return DivInto(s, s, FullOn(s.Device(), float32(a.Len()))) // the same rounded quotient
	}
	s.storage[0] /= float32(a.Len())
	return s
}

// keptShape returns a's shape with dimension dim set to 1.
func keptShape(shape []int, dim int) []int {
	k := cloneInts(shape)
	k[dim] = 1
	return k
}

func dropDim(shape []int, dim int) []int {
	return append(cloneInts(shape[:dim]), shape[dim+1:]...)
}

// SumDim returns the sum over dimension dim; keepDim keeps it with size 1.
func SumDim(a *Tensor, dim int, keepDim bool) *Tensor {
	dim = normDim("SumDim", dim, len(a.shape), a.shape)
	out := SumInto(NewOn(a.Device(), keptShape(a.shape, dim)...), a)
	if !keepDim {
		out = out.Reshape(dropDim(a.shape, dim)...)
	}
	return out
}

// MeanDim returns the mean over dimension dim; keepDim keeps it with size 1.
func MeanDim(a *Tensor, dim int, keepDim bool) *Tensor {
	dim = normDim("MeanDim", dim, len(a.shape), a.shape)
	out := SumDim(a, dim, keepDim)
	ScaleInto(out, out, 1/float32(a.shape[dim]))
	return out
}

// Max returns the largest element as a 0-dimensional tensor. It panics for
// an empty tensor. NaN propagates.
func Max(a *Tensor) *Tensor {
	if a.buf != nil {
		unsupported("Max", a.Device())
	}
	if a.Len() == 0 {
		panicf("Max: empty tensor of shape %v", a.shape)
	}
	m := float32(math.Inf(-1))
	c := a.Contiguous()
	for _, v := range c.Data() {
		if v > m || v != v {
			m = v
			if v != v {
				break
			}
		}
	}
	return Scalar(m)
}

// MaxDim returns the maximum over dimension dim and, for each result
// element, the index along dim where it was found (the first on ties).
// keepDim keeps dimension dim with size 1. It panics when dim is empty.
func MaxDim(a *Tensor, dim int, keepDim bool) (*Tensor, []int) {
	if a.buf != nil {
		unsupported("MaxDim", a.Device())
	}
	dim = normDim("MaxDim", dim, len(a.shape), a.shape)
	n := a.shape[dim]
	if n == 0 {
		panicf("MaxDim: dimension %d of shape %v is empty", dim, a.shape)
	}
	c := a.Contiguous()
	x := c.Data()
	outer, inner := 1, 1
	for _, s := range a.shape[:dim] {
		outer *= s
	}
	for _, s := range a.shape[dim+1:] {
		inner *= s
	}
	vals := make([]float32, outer*inner)
	idx := make([]int, outer*inner)
	for o := 0; o < outer; o++ {
		base := o * n * inner
		for i := 0; i < inner; i++ {
			best, bi := x[base+i], 0
			for j := 1; j < n; j++ {
				v := x[base+j*inner+i]
				if v > best || (v != v && best == best) {
					best, bi = v, j
				}
			}
			vals[o*inner+i], idx[o*inner+i] = best, bi
		}
	}
	shape := keptShape(a.shape, dim)
	if !keepDim {
		shape = dropDim(a.shape, dim)
	}
	return FromSlice(vals, shape...), idx
}

// ArgMax returns, for each row of a's last dimension, the index of its
// largest element (the first on ties), in row-major order of the other
// dimensions.
func ArgMax(a *Tensor) []int {
	if a.buf != nil {
		unsupported("ArgMax", a.Device())
	}
	if len(a.shape) == 0 {
		return []int{0}
	}
	_, idx := MaxDim(a, -1, false)
	return idx
}
