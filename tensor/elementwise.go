package tensor

import (
	"math"
	"slices"
	"unsafe"

	"github.com/cohortml/cohort/tensor/internal/vec"
)

// Elementwise kernels. Binary ops broadcast under NumPy/PyTorch rules. Each
// op has an allocating form (Add) and an Into form (AddInto) that writes a
// caller-owned dst of the broadcast shape and returns it; dst may be the
// same view as an input (in-place update) but must not otherwise overlap
// the inputs. Contiguous operands (and a row-broadcast operand such as a
// bias) run tight loops over the backing slices; other layouts take a
// strided path.

type binOp uint8

const (
	opCopy binOp = iota // dst = b
	opAdd               // dst = a + b
	opSub               // dst = a - b
	opMul               // dst = a * b
	opDiv               // dst = a / b
	opAxpy              // dst = a + alpha*b
	opMax               // dst = max(a, b)
	opMin               // dst = min(a, b)
)

func (op binOp) fn(alpha float32) func(x, y float32) float32 {
	switch op {
	case opCopy:
		return func(_, y float32) float32 { return y }
	case opAdd:
		return func(x, y float32) float32 { return x + y }
	case opSub:
		return func(x, y float32) float32 { return x - y }
	case opMul:
		return func(x, y float32) float32 { return x * y }
	case opDiv:
		return func(x, y float32) float32 { return x / y }
	case opAxpy:
		return func(x, y float32) float32 { return x + alpha*y }
	case opMax:
		return func(x, y float32) float32 { return max(x, y) }
	case opMin:
		return func(x, y float32) float32 { return min(x, y) }
	}
	panic("tensor: unknown binary op")
}

// binaryShape returns the broadcast shape of a and b, panicking with the
// op and both shapes when they are incompatible.
func binaryShape(name string, a, b *Tensor) []int {
	s, ok := BroadcastShapes(a.shape, b.shape)
	if !ok {
		panicf("%s: shapes %v and %v do not broadcast", name, a.shape, b.shape)
	}
	return s
}

func binary(name string, op binOp, alpha float32, a, b *Tensor) *Tensor {
	if a.buf != nil || b.buf != nil {
		return deviceBinary(name, op, alpha, nil, a, b)
	}
	out := Empty(binaryShape(name, a, b)...) // written whole
	binaryIntoAlpha(name, op, alpha, out, a, b)
	return out
}

func binaryInto(name string, op binOp, dst, a, b *Tensor) *Tensor {
	return binaryIntoAlpha(name, op, 1, dst, a, b)
}

func binaryIntoAlpha(name string, op binOp, alpha float32, dst, a, b *Tensor) *Tensor {
	if dst.buf != nil || a.buf != nil || b.buf != nil {
		return deviceBinary(name, op, alpha, dst, a, b)
	}
	shape := binaryShape(name, a, b)
	if !slices.Equal(shape, dst.shape) {
		panicf("%s: destination shape %v, want %v (from %v and %v)", name, dst.shape, shape, a.shape, b.shape)
	}
	n := dst.Len()
	if dst.IsContiguous() && a.IsContiguous() && b.IsContiguous() {
		if a.Len() == n && b.Len() == n {
			dd, ad, bd := dst.Data(), a.Data(), b.Data()
			if n < 2*elementwiseMin || !separateOrSame(dd, ad) || !separateOrSame(dd, bd) {
				binRowContig(op, alpha, dd, ad, bd)
				return dst
			}
			// Elementwise and in place at most: ranges on the GEMM's threads.
			parallelRanges(n, elementwiseMin, 16, func(lo, hi int) {
				binRowContig(op, alpha, dd[lo:hi], ad[lo:hi], bd[lo:hi])
			})
			return dst
		}
		if a.Len() == n && b.Len() == 1 {
			binRowScalarB(op, alpha, dst.Data(), a.Data(), b.storage[b.offset])
			return dst
		}
	}
	as, _ := broadcastStrides(a.shape, a.strides, shape)
	bs, _ := broadcastStrides(b.shape, b.strides, shape)
	l := newLoop(shape, dst.strides, as, bs)
	d, x, y := dst.storage, a.storage, b.storage
	var f func(x, y float32) float32
	l.rows(dst.offset, a.offset, b.offset, func(o0, o1, o2, n, s0, s1, s2 int) {
		switch {
		case s0 == 1 && s1 == 1 && s2 == 1:
			binRowContig(op, alpha, d[o0:o0+n], x[o1:o1+n], y[o2:o2+n])
		case s0 == 1 && s1 == 1 && s2 == 0:
			binRowScalarB(op, alpha, d[o0:o0+n], x[o1:o1+n], y[o2])
		default:
			if f == nil {
				f = op.fn(alpha)
			}
			for i := 0; i < n; i++ {
				d[o0+i*s0] = f(x[o1+i*s1], y[o2+i*s2])
			}
		}
	})
	return dst
}

// separateOrSame reports whether x and y are the same slice or do not
// overlap.
func separateOrSame(x, y []float32) bool {
	if len(x) == 0 || len(y) == 0 {
		return true
	}
	x0, y0 := uintptr(unsafe.Pointer(&x[0])), uintptr(unsafe.Pointer(&y[0]))
	if x0 == y0 {
		return len(x) == len(y)
	}
	return x0+4*uintptr(len(x)) <= y0 || y0+4*uintptr(len(y)) <= x0
}

func binRowContig(op binOp, alpha float32, d, a, b []float32) {
	a = a[:len(d)]
	b = b[:len(d)]
	// In place, d += b (alpha 1 multiplies exactly) runs on the vector
	// kernel, with the same sums.
	if len(d) > 0 && &d[0] == &a[0] && (op == opAdd || op == opAxpy && alpha == 1) {
		vec.Add(d, b)
		return
	}
	switch op {
	case opCopy:
		copy(d, b)
	case opAdd:
		for i := range d {
			d[i] = a[i] + b[i]
		}
	case opSub:
		for i := range d {
			d[i] = a[i] - b[i]
		}
	case opMul:
		for i := range d {
			d[i] = a[i] * b[i]
		}
	case opDiv:
		for i := range d {
			d[i] = a[i] / b[i]
		}
	case opAxpy:
		for i := range d {
			d[i] = a[i] + alpha*b[i]
		}
	default:
		f := op.fn(alpha)
		for i := range d {
			d[i] = f(a[i], b[i])
		}
	}
}

func binRowScalarB(op binOp, alpha float32, d, a []float32, b float32) {
	a = a[:len(d)]
	switch op {
	case opCopy:
		for i := range d {
			d[i] = b
		}
	case opAdd:
		for i := range d {
			d[i] = a[i] + b
		}
	case opSub:
		for i := range d {
			d[i] = a[i] - b
		}
	case opMul:
		for i := range d {
			d[i] = a[i] * b
		}
	case opDiv:
		for i := range d {
			d[i] = a[i] / b
		}
	case opAxpy:
		ab := alpha * b
		for i := range d {
			d[i] = a[i] + ab
		}
	default:
		f := op.fn(alpha)
		for i := range d {
			d[i] = f(a[i], b)
		}
	}
}

// Add returns a + b (broadcasting).
func Add(a, b *Tensor) *Tensor { return binary("Add", opAdd, 1, a, b) }

// Sub returns a − b (broadcasting).
func Sub(a, b *Tensor) *Tensor { return binary("Sub", opSub, 1, a, b) }

// Mul returns a · b elementwise (broadcasting).
func Mul(a, b *Tensor) *Tensor { return binary("Mul", opMul, 1, a, b) }

// Div returns a / b elementwise (broadcasting).
func Div(a, b *Tensor) *Tensor { return binary("Div", opDiv, 1, a, b) }

// Maximum returns max(a, b) elementwise (broadcasting).
func Maximum(a, b *Tensor) *Tensor { return binary("Maximum", opMax, 1, a, b) }

// Minimum returns min(a, b) elementwise (broadcasting).
func Minimum(a, b *Tensor) *Tensor { return binary("Minimum", opMin, 1, a, b) }

// AddInto writes a + b into dst and returns dst.
func AddInto(dst, a, b *Tensor) *Tensor { return binaryInto("AddInto", opAdd, dst, a, b) }

// SubInto writes a − b into dst and returns dst.
func SubInto(dst, a, b *Tensor) *Tensor { return binaryInto("SubInto", opSub, dst, a, b) }

// MulInto writes a · b into dst and returns dst.
func MulInto(dst, a, b *Tensor) *Tensor { return binaryInto("MulInto", opMul, dst, a, b) }

// DivInto writes a / b into dst and returns dst.
func DivInto(dst, a, b *Tensor) *Tensor { return binaryInto("DivInto", opDiv, dst, a, b) }

// AddScaled adds alpha·x to dst in place (dst += alpha·x); x must have
// dst's shape or broadcast to it. dst may be any view, e.g. a gradient
// living inside a flat bucket.
func AddScaled(dst *Tensor, alpha float32, x *Tensor) {
	binaryIntoAlpha("AddScaled", opAxpy, alpha, dst, dst, x)
}

// Unary elementwise ops.

// unOp is UnaryOp (backend.go): the unary ops have one enumeration.
type unOp = UnaryOp

func sigmoid64(x float64) float64 {
	if x >= 0 {
		return 1 / (1 + math.Exp(-x))
	}
	e := math.Exp(x)
	return e / (1 + e)
}

func unaryRow(op unOp, c float32, d, a []float32) {
	a = a[:len(d)]
	switch op {
	case UnaryNeg:
		for i, x := range a {
			d[i] = -x
		}
	case UnaryExp:
		mathKernels().Exp(d, a) // ≤ 2 ULP (see fused.go)
	case UnaryLog:
		for i, x := range a {
			d[i] = float32(math.Log(float64(x)))
		}
	case UnarySqrt:
		for i, x := range a {
			d[i] = float32(math.Sqrt(float64(x)))
		}
	case UnaryTanh:
		for i, x := range a {
			d[i] = float32(math.Tanh(float64(x)))
		}
	case UnarySigmoid:
		for i, x := range a {
			d[i] = float32(sigmoid64(float64(x)))
		}
	case UnaryReLU:
		vec.ReLU(d, a) // NaN stays NaN, −0 becomes +0, as max(x, 0)
	case UnaryAbs:
		for i, x := range a {
			d[i] = float32(math.Abs(float64(x)))
		}
	case UnaryGELU:
		for i, x := range a {
			v := float64(x)
			d[i] = float32(0.5 * v * (1 + math.Erf(v/math.Sqrt2)))
		}
	case UnaryGELUTanh:
		mathKernels().GELUTanh(d, a) // see fused.go for the error bound
	case UnarySiLU:
		for i, x := range a {
			v := float64(x)
			d[i] = float32(v * sigmoid64(v))
		}
	case UnarySquare:
		for i, x := range a {
			d[i] = x * x
		}
	case UnaryAddScalar:
		for i, x := range a {
			d[i] = x + c
		}
	case UnaryScale:
		mathKernels().Scale(d, a, c) // one rounded product each, as x·c
	case UnaryPow:
		for i, x := range a {
			d[i] = float32(math.Pow(float64(x), float64(c)))
		}
	default:
		panic("tensor: unknown unary op")
	}
}

func unary(name string, op unOp, c float32, dst, a *Tensor) *Tensor {
	if a.buf != nil || dst != nil && dst.buf != nil {
		return deviceUnary(name, op, c, dst, a)
	}
	if dst == nil {
		dst = Empty(a.shape...) // every element is written below
	} else if !slices.Equal(dst.shape, a.shape) {
		panicf("%s: destination shape %v, want %v", name, dst.shape, a.shape)
	}
	if dst.IsContiguous() && a.IsContiguous() {
		unaryRow(op, c, dst.Data(), a.Data())
		return dst
	}
	l := newLoop(a.shape, dst.strides, a.strides)
	var buf []float32
	l.rows(dst.offset, a.offset, 0, func(o0, o1, _, n, s0, s1, _ int) {
		if s0 == 1 && s1 == 1 {
			unaryRow(op, c, dst.storage[o0:o0+n], a.storage[o1:o1+n])
			return
		}
		if cap(buf) < n {
			buf = make([]float32, n)
		}
		b := buf[:n]
		for i := range b {
			b[i] = a.storage[o1+i*s1]
		}
		unaryRow(op, c, b, b)
		for i, v := range b {
			dst.storage[o0+i*s0] = v
		}
	})
	return dst
}

// Neg returns −a.
func Neg(a *Tensor) *Tensor { return unary("Neg", UnaryNeg, 0, nil, a) }

// Exp returns eᵃ elementwise.
func Exp(a *Tensor) *Tensor { return unary("Exp", UnaryExp, 0, nil, a) }

// Log returns the natural logarithm elementwise.
func Log(a *Tensor) *Tensor { return unary("Log", UnaryLog, 0, nil, a) }

// Sqrt returns the square root elementwise.
func Sqrt(a *Tensor) *Tensor { return unary("Sqrt", UnarySqrt, 0, nil, a) }

// Tanh returns tanh elementwise.
func Tanh(a *Tensor) *Tensor { return unary("Tanh", UnaryTanh, 0, nil, a) }

// Sigmoid returns 1/(1+e⁻ᵃ) elementwise.
func Sigmoid(a *Tensor) *Tensor { return unary("Sigmoid", UnarySigmoid, 0, nil, a) }

// ReLU returns max(a, 0) elementwise.
func ReLU(a *Tensor) *Tensor { return unary("ReLU", UnaryReLU, 0, nil, a) }

// Abs returns |a| elementwise.
func Abs(a *Tensor) *Tensor { return unary("Abs", UnaryAbs, 0, nil, a) }

// GELU returns the exact GELU, x·Φ(x) = 0.5·x·(1+erf(x/√2)), elementwise.
func GELU(a *Tensor) *Tensor { return unary("GELU", UnaryGELU, 0, nil, a) }

// GELUTanh returns the tanh approximation of GELU,
// 0.5·x·(1+tanh(√(2/π)·(x+0.044715·x³))), elementwise.
func GELUTanh(a *Tensor) *Tensor { return unary("GELUTanh", UnaryGELUTanh, 0, nil, a) }

// SiLU returns x·sigmoid(x) elementwise.
func SiLU(a *Tensor) *Tensor { return unary("SiLU", UnarySiLU, 0, nil, a) }

// Square returns a² elementwise.
func Square(a *Tensor) *Tensor { return unary("Square", UnarySquare, 0, nil, a) }

// AddScalar returns a + c.
func AddScalar(a *Tensor, c float32) *Tensor { return unary("AddScalar", UnaryAddScalar, c, nil, a) }

// Scale returns c·a.
func Scale(a *Tensor, c float32) *Tensor { return unary("Scale", UnaryScale, c, nil, a) }

// Pow returns aᶜ elementwise.
func Pow(a *Tensor, c float32) *Tensor { return unary("Pow", UnaryPow, c, nil, a) }

// The Into forms write into dst (shape of a) and return it; dst may be a.

// NegInto writes −a into dst.
func NegInto(dst, a *Tensor) *Tensor { return unary("NegInto", UnaryNeg, 0, dst, a) }

// ExpInto writes eᵃ into dst.
func ExpInto(dst, a *Tensor) *Tensor { return unary("ExpInto", UnaryExp, 0, dst, a) }

// LogInto writes log(a) into dst.
func LogInto(dst, a *Tensor) *Tensor { return unary("LogInto", UnaryLog, 0, dst, a) }

// SqrtInto writes √a into dst.
func SqrtInto(dst, a *Tensor) *Tensor { return unary("SqrtInto", UnarySqrt, 0, dst, a) }

// TanhInto writes tanh(a) into dst.
func TanhInto(dst, a *Tensor) *Tensor { return unary("TanhInto", UnaryTanh, 0, dst, a) }

// SigmoidInto writes sigmoid(a) into dst.
func SigmoidInto(dst, a *Tensor) *Tensor { return unary("SigmoidInto", UnarySigmoid, 0, dst, a) }

// ReLUInto writes max(a, 0) into dst.
func ReLUInto(dst, a *Tensor) *Tensor { return unary("ReLUInto", UnaryReLU, 0, dst, a) }

// GELUInto writes the exact GELU of a into dst.
func GELUInto(dst, a *Tensor) *Tensor { return unary("GELUInto", UnaryGELU, 0, dst, a) }

// GELUTanhInto writes the tanh-approximated GELU of a into dst.
func GELUTanhInto(dst, a *Tensor) *Tensor { return unary("GELUTanhInto", UnaryGELUTanh, 0, dst, a) }

// SiLUInto writes x·sigmoid(x) into dst.
func SiLUInto(dst, a *Tensor) *Tensor { return unary("SiLUInto", UnarySiLU, 0, dst, a) }

// AddScalarInto writes a + c into dst.
func AddScalarInto(dst, a *Tensor, c float32) *Tensor {
	return unary("AddScalarInto", UnaryAddScalar, c, dst, a)
}

// ScaleInto writes c·a into dst; ScaleInto(t, t, c) scales t in place.
func ScaleInto(dst, a *Tensor, c float32) *Tensor { return unary("ScaleInto", UnaryScale, c, dst, a) }

// ReLUBackward returns the gradient of ReLU given the output gradient dy
// and ReLU's output y (same shape): dy where y > 0, 0 where y = 0 (PyTorch's
// convention at 0). A NaN in y passes dy through.
func ReLUBackward(dy, y *Tensor) *Tensor {
	return ReLUBackwardInto(EmptyOn(y.Device(), y.shape...), dy, y)
}

// ReLUBackwardInto writes ReLUBackward(dy, y) into dst and returns it; dst
// may be dy.
func ReLUBackwardInto(dst, dy, y *Tensor) *Tensor {
	if !slices.Equal(dy.shape, y.shape) || !slices.Equal(dst.shape, y.shape) {
		panicf("ReLUBackward: gradient shape %v, output shape %v, destination shape %v: want equal", dy.shape, y.shape, dst.shape)
	}
	if dst.buf != nil || dy.buf != nil || y.buf != nil {
		_, be := deviceOf("ReLUBackward", dst, dy, y)
		be.ReLUBackward(dst, dy, y)
		return dst
	}
	if dst.IsContiguous() && dy.IsContiguous() && y.IsContiguous() {
		reluMaskRow(dst.Data(), dy.Data(), y.Data())
		return dst
	}
	yc, dyc := y.Contiguous(), dy.Contiguous()
	if dst.IsContiguous() {
		reluMaskRow(dst.Data(), dyc.Data(), yc.Data())
		return dst
	}
	tmp := New(y.shape...)
	reluMaskRow(tmp.Data(), dyc.Data(), yc.Data())
	dst.CopyFrom(tmp)
	return dst
}
