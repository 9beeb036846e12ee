package autograd

import (
	"fmt"
	"math"
	"slices"

	"github.com/cohortml/cohort/tensor"
)

// Elementwise ops. Binary ops broadcast like tensor.Add; their backward
// sums each gradient back to its input's shape.

// reduceTo sums g down to shape (undoing broadcasting) and reports whether
// the result is a fresh tensor.
func reduceTo(g *tensor.Tensor, shape []int) (*tensor.Tensor, bool) {
	if slices.Equal(g.Shape(), shape) {
		return g, false
	}
	return tensor.SumTo(g, shape...), true
}

// addReduced delivers g, summed to input i's shape, scaled by sign.
func addReduced(s *sink, i int, g *tensor.Tensor, sign float32) {
	if !s.need(i) {
		return
	}
	r, fresh := reduceTo(g, s.n.inputs[i].Value.Shape())
	if sign != 1 {
		if fresh {
			tensor.ScaleInto(r, r, sign)
		} else {
			r, fresh = tensor.Scale(r, sign), true
		}
	}
	if dst, overwrite := s.into(i); dst != nil {
		if overwrite {
			dst.CopyFrom(r)
		} else {
			tensor.AddScaled(dst, 1, r)
		}
		s.settle(i)
		return
	}
	s.add(i, r, fresh)
}

// Add returns a + b (broadcasting).
func Add(a, b *Var) *Var {
	y := tensor.Add(a.Value, b.Value)
	v := record("Add", y, []*Var{a, b}, func(g *tensor.Tensor, s *sink) {
		addReduced(s, 0, g, 1)
		addReduced(s, 1, g, 1)
	})
	if v.node != nil {
		v.node.own = y // fresh storage, not read by the backward
	}
	return v
}

// Sub returns a − b (broadcasting).
func Sub(a, b *Var) *Var {
	return record("Sub", tensor.Sub(a.Value, b.Value), []*Var{a, b}, func(g *tensor.Tensor, s *sink) {
		addReduced(s, 0, g, 1)
		addReduced(s, 1, g, -1)
	})
}

// Mul returns a · b elementwise (broadcasting).
func Mul(a, b *Var) *Var {
	av, bv := a.Value, b.Value
	return record("Mul", tensor.Mul(av, bv), []*Var{a, b}, func(g *tensor.Tensor, s *sink) {
		if s.need(0) {
			addReduced(s, 0, tensor.Mul(g, bv), 1)
		}
		if s.need(1) {
			addReduced(s, 1, tensor.Mul(g, av), 1)
		}
	})
}

// Div returns a / b elementwise (broadcasting).
func Div(a, b *Var) *Var {
	av, bv := a.Value, b.Value
	y := tensor.Div(av, bv)
	return record("Div", y, []*Var{a, b}, func(g *tensor.Tensor, s *sink) {
		gb := tensor.Div(g, bv) // g/b
		if s.need(1) {
			addReduced(s, 1, tensor.Mul(gb, y), -1) // −g·a/b²
		}
		if s.need(0) {
			addReduced(s, 0, gb, 1)
		}
	})
}

// AddScalar returns x + c.
func AddScalar(x *Var, c float32) *Var {
	return record("AddScalar", tensor.AddScalar(x.Value, c), []*Var{x}, func(g *tensor.Tensor, s *sink) {
		addReduced(s, 0, g, 1)
	})
}

// Scale returns c·x.
func Scale(x *Var, c float32) *Var {
	return record("Scale", tensor.Scale(x.Value, c), []*Var{x}, func(g *tensor.Tensor, s *sink) {
		s.add(0, tensor.Scale(g, c), true)
	})
}

// Neg returns −x.
func Neg(x *Var) *Var { return Scale(x, -1) }

// unaryGrad builds a unary op whose derivative is computed per element
// from the input x and the output y: dx = g·deriv(x, y).
//
// On a device the gradient is devGrad(g, x, y), the same float32
// operations in the same order as deriv as tensor ops (so equal bit for
// bit); an op whose derivative has no such form passes nil and is not
// available there.
func unaryOp(name string, x *Var, y *tensor.Tensor, deriv func(dx, g, xd, yd []float32), devGrad func(g, x, y *tensor.Tensor) *tensor.Tensor) *Var {
	xv := x.Value
	if dev := xv.Device(); !dev.IsCPU() {
		if devGrad == nil {
			panic(fmt.Sprintf("autograd: %s: its gradient is not available on %v yet", name, dev))
		}
		return record(name, y, []*Var{x}, func(g *tensor.Tensor, s *sink) {
			s.add(0, devGrad(g, xv, y), true)
		})
	}
	return record(name, y, []*Var{x}, func(g *tensor.Tensor, s *sink) {
		dx := tensor.New(xv.Shape()...)
		deriv(dx.Data(), g.Contiguous().Data(), xv.Contiguous().Data(), y.Data())
		s.add(0, dx, true)
	})
}

// Exp returns eˣ.
func Exp(x *Var) *Var {
	return unaryOp("Exp", x, tensor.Exp(x.Value), func(dx, g, _, y []float32) {
		for i := range dx {
			dx[i] = g[i] * y[i]
		}
	}, func(g, _, y *tensor.Tensor) *tensor.Tensor { return tensor.Mul(g, y) })
}

// Log returns the natural logarithm.
func Log(x *Var) *Var {
	return unaryOp("Log", x, tensor.Log(x.Value), func(dx, g, xd, _ []float32) {
		for i := range dx {
			dx[i] = g[i] / xd[i]
		}
	}, func(g, x, _ *tensor.Tensor) *tensor.Tensor { return tensor.Div(g, x) })
}

// Sqrt returns √x.
func Sqrt(x *Var) *Var {
	return unaryOp("Sqrt", x, tensor.Sqrt(x.Value), func(dx, g, _, y []float32) {
		for i := range dx {
			dx[i] = g[i] * 0.5 / y[i]
		}
	}, func(g, _, y *tensor.Tensor) *tensor.Tensor { return tensor.Div(tensor.Scale(g, 0.5), y) })
}

// Abs returns |x| (subgradient 0 at 0).
func Abs(x *Var) *Var {
	return unaryOp("Abs", x, tensor.Abs(x.Value), func(dx, g, xd, _ []float32) {
		for i, v := range xd {
			switch {
			case v > 0:
				dx[i] = g[i]
			case v < 0:
				dx[i] = -g[i]
			default:
				dx[i] = 0
			}
		}
	}, nil)
}

// Square returns x².
func Square(x *Var) *Var {
	return unaryOp("Square", x, tensor.Square(x.Value), func(dx, g, xd, _ []float32) {
		for i, v := range xd {
			dx[i] = 2 * v * g[i]
		}
	}, func(g, x, _ *tensor.Tensor) *tensor.Tensor { return tensor.Mul(tensor.Scale(x, 2), g) })
}

// Pow returns xᶜ.
func Pow(x *Var, c float32) *Var {
	return unaryOp("Pow", x, tensor.Pow(x.Value, c), func(dx, g, xd, _ []float32) {
		for i, v := range xd {
			dx[i] = g[i] * c * float32(math.Pow(float64(v), float64(c-1)))
		}
	}, func(g, x, _ *tensor.Tensor) *tensor.Tensor { return tensor.Mul(tensor.Scale(g, c), tensor.Pow(x, c-1)) })
}

// Tanh returns tanh(x).
func Tanh(x *Var) *Var {
	return unaryOp("Tanh", x, tensor.Tanh(x.Value), func(dx, g, _, y []float32) {
		for i, v := range y {
			dx[i] = g[i] * (1 - v*v)
		}
	}, func(g, _, y *tensor.Tensor) *tensor.Tensor {
		return tensor.Mul(g, tensor.AddScalar(tensor.Neg(tensor.Mul(y, y)), 1)) // 1 − v² is 1 + (−v²) exactly
	})
}

// Sigmoid returns 1/(1+e⁻ˣ).
func Sigmoid(x *Var) *Var {
	return unaryOp("Sigmoid", x, tensor.Sigmoid(x.Value), func(dx, g, _, y []float32) {
		for i, v := range y {
			dx[i] = g[i] * v * (1 - v)
		}
	}, func(g, _, y *tensor.Tensor) *tensor.Tensor {
		return tensor.Mul(tensor.Mul(g, y), tensor.AddScalar(tensor.Neg(y), 1))
	})
}

// ReLU returns max(x, 0) (gradient 0 at 0, as PyTorch).
func ReLU(x *Var) *Var {
	y := tensor.ReLU(x.Value)
	return record("ReLU", y, []*Var{x}, func(g *tensor.Tensor, s *sink) {
		if s.gradPrivate() && g.IsContiguous() {
			s.pass(0, tensor.ReLUBackwardInto(g, g, y)) // mask in place, hand g on
			return
		}
		s.add(0, tensor.ReLUBackward(g, y), true)
	})
}

// GELU returns the exact GELU x·Φ(x). Φ(x) is kept from the forward pass
// for the gradient Φ(x) + x·φ(x).
func GELU(x *Var) *Var {
	xd := x.Value.Contiguous().Data()
	y := tensor.New(x.Value.Shape()...)
	cdf := make([]float32, len(xd))
	yd := y.Data()
	for i, v := range xd {
		c := 0.5 * (1 + math.Erf(float64(v)/math.Sqrt2))
		cdf[i] = float32(c)
		yd[i] = float32(float64(v) * c)
	}
	return unaryOp("GELU", x, y, func(dx, g, xd, _ []float32) {
		const invSqrt2Pi = 0.3989422804014327 // 1/√(2π)
		for i, v := range xd {
			x := float64(v)
			dx[i] = g[i] * float32(float64(cdf[i])+x*invSqrt2Pi*math.Exp(-0.5*x*x))
		}
	}, nil)
}

// GELUTanh returns the tanh approximation 0.5·x·(1+tanh(√(2/π)·(x+0.044715·x³))),
// vectorised (error bound in tensor's fused kernels). The gradient is
// recomputed from x; nothing else is kept.
func GELUTanh(x *Var) *Var {
	xv := x.Value
	y := tensor.GELUTanh(xv)
	v := record("GELUTanh", y, []*Var{x}, func(g *tensor.Tensor, s *sink) {
		if s.gradPrivate() && g.IsContiguous() && xv.IsContiguous() {
			s.pass(0, tensor.GELUTanhBackwardInto(g, g, xv)) // in place, handed on
			return
		}
		s.add(0, tensor.GELUTanhBackward(g, xv), true)
	})
	if v.node != nil {
		v.node.own = y // fresh storage, not read by the backward
	}
	return v
}

// SiLU returns x·sigmoid(x).
func SiLU(x *Var) *Var {
	return unaryOp("SiLU", x, tensor.SiLU(x.Value), func(dx, g, xd, _ []float32) {
		for i, v := range xd {
			x := float64(v)
			var sg float64
			if x >= 0 {
				sg = 1 / (1 + math.Exp(-x))
			} else {
				e := math.Exp(x)
				sg = e / (1 + e)
			}
			dx[i] = g[i] * float32(sg*(1+x*(1-sg)))
		}
	}, nil)
}
