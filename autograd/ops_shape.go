package autograd

import (
	"fmt"

	"github.com/cohortml/cohort/tensor"
)

// Reductions and view ops. Views share storage with their input (as the
// tensor methods of the same name do); their gradients are reshaped,
// permuted or scattered back to the input's layout.

// Sum returns the sum of all elements as a 0-dimensional Var.
func Sum(x *Var) *Var {
	shape := x.Value.Shape()
	return record("Sum", tensor.Sum(x.Value), []*Var{x}, func(g *tensor.Tensor, s *sink) {
		s.add(0, broadcastScalar(g, 1, shape), true)
	})
}

// Mean returns the mean of all elements as a 0-dimensional Var.
func Mean(x *Var) *Var {
	shape := x.Value.Shape()
	n := float32(x.Value.Len())
	return record("Mean", tensor.Mean(x.Value), []*Var{x}, func(g *tensor.Tensor, s *sink) {
		s.add(0, broadcastScalar(g, n, shape), true)
	})
}

// broadcastScalar returns a tensor of the given shape, on g's device,
// filled with the value of the one-element g divided by n.
func broadcastScalar(g *tensor.Tensor, n float32, shape []int) *tensor.Tensor {
	if g.Device().IsCPU() {
		v := g.Item()
		if n != 1 {
			v /= n
		}
		return tensor.Full(v, shape...)
	}
	if n != 1 {
		g = tensor.Div(g, tensor.FullOn(g.Device(), n, g.Shape()...)) // the same rounded quotient
	}
	out := tensor.NewOn(g.Device(), shape...)
	out.CopyFrom(g.Reshape(make([]int, 0)...).Expand(shape...))
	return out
}

// SumDim returns the sum over dimension dim; keepDim keeps it with size 1.
func SumDim(x *Var, dim int, keepDim bool) *Var {
	return reduceDim("SumDim", x, dim, keepDim, 1)
}

// MeanDim returns the mean over dimension dim; keepDim keeps it with size 1.
func MeanDim(x *Var, dim int, keepDim bool) *Var {
	d := dim
	if d < 0 {
		d += x.Value.Dims()
	}
	return reduceDim("MeanDim", x, dim, keepDim, 1/float32(x.Value.Dim(d)))
}

func reduceDim(name string, x *Var, dim int, keepDim bool, scale float32) *Var {
	y := tensor.SumDim(x.Value, dim, true)
	if scale != 1 {
		tensor.ScaleInto(y, y, scale)
	}
	kept := y.Shape()
	if !keepDim {
		d := dim
		if d < 0 {
			d += x.Value.Dims()
		}
		y = y.Squeeze(d)
	}
	shape := x.Value.Shape()
	return record(name, y, []*Var{x}, func(g *tensor.Tensor, s *sink) {
		dx := tensor.NewOn(x.Value.Device(), shape...)
		dx.CopyFrom(g.Reshape(kept...))
		if scale != 1 {
			tensor.ScaleInto(dx, dx, scale)
		}
		s.add(0, dx, true)
	})
}

// MaxDim returns the maximum over dimension dim (keepDim keeps it with size
// 1). The gradient flows to the first maximal element of each slice.
func MaxDim(x *Var, dim int, keepDim bool) *Var {
	y, idx := tensor.MaxDim(x.Value, dim, keepDim)
	shape := x.Value.Shape()
	d := dim
	if d < 0 {
		d += len(shape)
	}
	n, inner := shape[d], 1
	for _, v := range shape[d+1:] {
		inner *= v
	}
	return record("MaxDim", y, []*Var{x}, func(g *tensor.Tensor, s *sink) {
		dx := tensor.NewOn(x.Value.Device(), shape...)
		dd, gd := dx.Data(), g.Contiguous().Data()
		for k, j := range idx {
			o, i := k/inner, k%inner
			dd[(o*n+j)*inner+i] += gd[k]
		}
		s.add(0, dx, true)
	})
}

// Max returns the largest element as a 0-dimensional Var.
func Max(x *Var) *Var {
	return MaxDim(Reshape(x, x.Value.Len()), 0, false)
}

// Reshape returns x with a new shape (one entry may be −1); a view when x
// is contiguous.
func Reshape(x *Var, shape ...int) *Var {
	in := x.Value.Shape()
	return record("Reshape", x.Value.Reshape(shape...), []*Var{x}, func(g *tensor.Tensor, s *sink) {
		if s.gradPrivate() {
			s.pass(0, g.Reshape(in...)) // the input owns the gradient: recycled or reused further down
			return
		}
		s.add(0, g.Reshape(in...), false)
	})
}

// Flatten reshapes x to [x.Dim(0), rest].
func Flatten(x *Var) *Var {
	if x.Value.Dims() == 0 {
		panic("autograd: Flatten of a 0-dimensional Var")
	}
	return Reshape(x, x.Value.Dim(0), -1)
}

// Transpose returns the view of x with dimensions d0 and d1 swapped.
func Transpose(x *Var, d0, d1 int) *Var {
	return record("Transpose", x.Value.Transpose(d0, d1), []*Var{x}, func(g *tensor.Tensor, s *sink) {
		s.add(0, g.Transpose(d0, d1), false)
	})
}

// Permute returns the view of x whose dimension i is x's dimension dims[i].
func Permute(x *Var, dims ...int) *Var {
	y := x.Value.Permute(dims...)
	inv := make([]int, len(dims))
	for i, d := range dims {
		if d < 0 {
			d += len(dims)
		}
		inv[d] = i
	}
	return record("Permute", y, []*Var{x}, func(g *tensor.Tensor, s *sink) {
		s.add(0, g.Permute(inv...), false)
	})
}

// Narrow returns the view of length elements of dimension dim from start.
func Narrow(x *Var, dim, start, length int) *Var {
	shape := x.Value.Shape()
	return record("Narrow", x.Value.Narrow(dim, start, length), []*Var{x}, func(g *tensor.Tensor, s *sink) {
		dx := tensor.NewOn(x.Value.Device(), shape...)
		dx.Narrow(dim, start, length).CopyFrom(g)
		s.add(0, dx, true)
	})
}

// Slice returns the view of indices [start, end) of dimension dim.
func Slice(x *Var, dim, start, end int) *Var {
	if end < start {
		panic(fmt.Sprintf("autograd: Slice: end %d before start %d", end, start))
	}
	return Narrow(x, dim, start, end-start)
}

// Unsqueeze inserts a dimension of size 1 at dim.
func Unsqueeze(x *Var, dim int) *Var {
	in := x.Value.Shape()
	return record("Unsqueeze", x.Value.Unsqueeze(dim), []*Var{x}, func(g *tensor.Tensor, s *sink) {
		s.add(0, g.Reshape(in...), false)
	})
}

// Squeeze removes dimension dim, which must have size 1.
func Squeeze(x *Var, dim int) *Var {
	in := x.Value.Shape()
	return record("Squeeze", x.Value.Squeeze(dim), []*Var{x}, func(g *tensor.Tensor, s *sink) {
		s.add(0, g.Reshape(in...), false)
	})
}

// Contiguous returns x itself when its Value is contiguous, else a
// contiguous copy (recorded, so gradients flow through it).
func Contiguous(x *Var) *Var {
	if x.Value.IsContiguous() {
		return x
	}
	return record("Contiguous", x.Value.Contiguous(), []*Var{x}, func(g *tensor.Tensor, s *sink) {
		s.add(0, g, false)
	})
}

// Concat joins xs along dimension dim; all other dimensions must agree.
func Concat(dim int, xs ...*Var) *Var {
	if len(xs) == 0 {
		panic("autograd: Concat of nothing")
	}
	first := xs[0].Value.Shape()
	nd := len(first)
	if dim < 0 {
		dim += nd
	}
	if dim < 0 || dim >= nd {
		panic(fmt.Sprintf("autograd: Concat: dimension %d out of range for shape %v", dim, first))
	}
	shape := append([]int(nil), first...)
	shape[dim] = 0
	for _, x := range xs {
		sh := x.Value.Shape()
		ok := len(sh) == nd
		for i := 0; ok && i < nd; i++ {
			ok = i == dim || sh[i] == first[i]
		}
		if !ok {
			panic(fmt.Sprintf("autograd: Concat along %d: shape %v does not match %v", dim, sh, first))
		}
		shape[dim] += sh[dim]
	}
	y := tensor.NewOn(xs[0].Value.Device(), shape...)
	starts := make([]int, len(xs))
	off := 0
	for i, x := range xs {
		starts[i] = off
		n := x.Value.Dim(dim)
		y.Narrow(dim, off, n).CopyFrom(x.Value)
		off += n
	}
	return record("Concat", y, xs, func(g *tensor.Tensor, s *sink) {
		for i, x := range xs {
			if s.need(i) {
				s.add(i, g.Narrow(dim, starts[i], x.Value.Dim(dim)), false)
			}
		}
	})
}

// Select returns the view at index i of dimension dim, with that dimension
// removed.
func Select(x *Var, dim, i int) *Var {
	shape := x.Value.Shape()
	return record("Select", x.Value.Select(dim, i), []*Var{x}, func(g *tensor.Tensor, s *sink) {
		dx := tensor.NewOn(x.Value.Device(), shape...)
		dx.Select(dim, i).CopyFrom(g)
		s.add(0, dx, true)
	})
}
