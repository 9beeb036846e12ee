package tensor

import (
	"fmt"
	"github.com/cohortml/cohort/tensor/tensortest"
	"math"
	"math/rand/v2"
	"testing"
)

// layouts returns the same values of shape as a contiguous tensor, a
// transposed view and a sliced view, so kernels see every stride pattern.
func layouts(rng interface{ NormFloat64() float64 }, shape []int) map[string]*Tensor {
	c := New(shape...)
	for i := range c.Data() {
		c.Data()[i] = float32(rng.NormFloat64())
	}
	out := map[string]*Tensor{"contig": c}
	if len(shape) >= 2 {
		nd := len(shape)
		ts := append([]int(nil), shape...)
		ts[nd-1], ts[nd-2] = ts[nd-2], ts[nd-1]
		tr := New(ts...)
		tr.Transpose(-1, -2).CopyFrom(c)
		out["transposed"] = tr.Transpose(-1, -2)
	}
	if len(shape) >= 1 {
		ws := append([]int(nil), shape...)
		ws[len(ws)-1] += 3
		w := New(ws...)
		v := w.Narrow(-1, 2, shape[len(shape)-1])
		v.CopyFrom(c)
		out["sliced"] = v
	}
	return out
}

func TestBinaryBroadcast(t *testing.T) {
	rng := newRNG(1)
	ops := []struct {
		name string
		f    func(a, b *Tensor) *Tensor
		into func(d, a, b *Tensor) *Tensor
		ref  func(x, y float32) float32
	}{
		{"add", Add, AddInto, func(x, y float32) float32 { return x + y }},
		{"sub", Sub, SubInto, func(x, y float32) float32 { return x - y }},
		{"mul", Mul, MulInto, func(x, y float32) float32 { return x * y }},
		{"div", Div, DivInto, func(x, y float32) float32 { return x / y }},
	}
	shapes := [][2][]int{
		{{4, 5}, {4, 5}},
		{{4, 5}, {5}},
		{{2, 3, 4}, {3, 1}},
		{{3, 1}, {1, 4}},
		{{2, 3, 4}, {}},
		{{}, {2, 3}},
		{{0, 3}, {3}},
		{{6}, {6}},
	}
	for _, op := range ops {
		for _, sh := range shapes {
			for la, a := range layouts(rng, sh[0]) {
				for lb, b := range layouts(rng, sh[1]) {
					name := fmt.Sprintf("%s/%v_%s/%v_%s", op.name, sh[0], la, sh[1], lb)
					t.Run(name, func(t *testing.T) {
						got := op.f(a, b)
						out, _ := BroadcastShapes(a.Shape(), b.Shape())
						var want []float32
						tensortest.ForEachIndex(out, func(idx []int) {
							want = append(want, op.ref(a.At(bcIdx(idx, a.Shape())...), b.At(bcIdx(idx, b.Shape())...)))
						})
						assertClose(t, "out", got.Data(), want, 1e-6)
						// Into a strided destination.
						if len(out) == 2 {
							d := New(out[1], out[0]).T()
							op.into(d, a, b)
							assertClose(t, "into transposed", naiveValues(d), want, 1e-6)
						}
					})
				}
			}
		}
	}
}

// bcIdx maps an index of the broadcast shape onto an operand of shape s.
func bcIdx(idx, s []int) []int {
	out := make([]int, len(s))
	lead := len(idx) - len(s)
	for i := range s {
		if s[i] != 1 {
			out[i] = idx[lead+i]
		}
	}
	return out
}

func TestBinaryInPlaceAndAddScaled(t *testing.T) {
	a := FromSlice([]float32{1, 2, 3, 4}, 2, 2)
	AddInto(a, a, FromSlice([]float32{10, 20}, 2))
	assertClose(t, "in place", a.Data(), []float32{11, 22, 13, 24}, 0)
	buf := make([]float32, 6)
	g := FromSlice(buf[1:5], 2, 2) // a gradient living inside a larger buffer
	AddScaled(g, 0.5, a)
	AddScaled(g, 0.5, a)
	assertClose(t, "bucket view", buf, []float32{0, 11, 22, 13, 24, 0}, 0)
}

func TestUnary(t *testing.T) {
	rng := newRNG(2)
	ops := []struct {
		name string
		f    func(*Tensor) *Tensor
		ref  func(float64) float64
		pos  bool // needs positive input
	}{
		{"neg", Neg, func(x float64) float64 { return -x }, false},
		{"exp", Exp, math.Exp, false},
		{"log", Log, math.Log, true},
		{"sqrt", Sqrt, math.Sqrt, true},
		{"tanh", Tanh, math.Tanh, false},
		{"sigmoid", Sigmoid, func(x float64) float64 { return 1 / (1 + math.Exp(-x)) }, false},
		{"relu", ReLU, func(x float64) float64 { return math.Max(x, 0) }, false},
		{"abs", Abs, math.Abs, false},
		{"gelu", GELU, func(x float64) float64 { return x * 0.5 * math.Erfc(-x/math.Sqrt2) }, false},
		{"gelu_tanh", GELUTanh, func(x float64) float64 {
			return 0.5 * x * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(x+0.044715*x*x*x)))
		}, false},
		{"silu", SiLU, func(x float64) float64 { return x / (1 + math.Exp(-x)) }, false},
		{"square", Square, func(x float64) float64 { return x * x }, false},
		{"add_scalar", func(a *Tensor) *Tensor { return AddScalar(a, 1.5) }, func(x float64) float64 { return x + 1.5 }, false},
		{"scale", func(a *Tensor) *Tensor { return Scale(a, -2) }, func(x float64) float64 { return -2 * x }, false},
		{"pow", func(a *Tensor) *Tensor { return Pow(a, 1.5) }, func(x float64) float64 { return math.Pow(x, 1.5) }, true},
	}
	for _, op := range ops {
		for lay, x := range layouts(rng, []int{3, 5}) {
			t.Run(op.name+"/"+lay, func(t *testing.T) {
				if op.pos {
					x = AddScalar(Abs(x), 0.1)
				}
				got := op.f(x)
				var want []float32
				for _, v := range naiveValues(x) {
					want = append(want, float32(op.ref(float64(v))))
				}
				assertClose(t, op.name, got.Data(), want, 1e-6)
			})
		}
	}
	t.Run("sigmoid_extremes", func(t *testing.T) {
		got := Sigmoid(FromSlice([]float32{-1000, 1000}, 2)).Data()
		if got[0] != 0 || got[1] != 1 {
			t.Errorf("sigmoid(±1000) = %v, want [0 1]", got)
		}
	})
	t.Run("into_transposed", func(t *testing.T) {
		x := arange(2, 3)
		d := New(3, 2)
		ExpInto(d.T(), x)
		assertClose(t, "exp", naiveValues(d.T()), Exp(x).Data(), 1e-6)
	})
}

func TestBinaryPanics(t *testing.T) {
	mustPanic(t, func() { Add(New(2, 3), New(4)) }, "tensor: Add", "[2 3]", "[4]")
	mustPanic(t, func() { MulInto(New(3), New(2, 3), New(3)) }, "tensor: MulInto", "[3]", "[2 3]")
	mustPanic(t, func() { ExpInto(New(3), New(2)) }, "ExpInto", "[3]", "[2]")
}

func TestReLUBackward(t *testing.T) {
	nan := float32(math.NaN())
	negZero := float32(math.Copysign(0, -1))
	for _, c := range []struct {
		name       string
		dy, y, out []float32
	}{
		{"mixed", []float32{1, 2, 3, 4, 5}, []float32{0.5, 0, 2, negZero, nan}, []float32{1, 0, 3, 0, 5}},
		{"long", make([]float32, 37), make([]float32, 37), make([]float32, 37)},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.name == "long" { // every third output positive
				for i := range c.dy {
					c.dy[i] = float32(i + 1)
					if i%3 == 0 {
						c.y[i], c.out[i] = 1, float32(i+1)
					}
				}
			}
			n := len(c.y)
			dy, y := FromSlice(c.dy, n), FromSlice(c.y, n)
			assertClose(t, "ReLUBackward", ReLUBackward(dy, y).Data(), c.out, 0)
			// Strided operands and an in-place destination.
			wide := New(n, 2)
			col := wide.Narrow(1, 1, 1).Reshape(n)
			col.CopyFrom(dy)
			got := ReLUBackwardInto(col, col, y)
			assertClose(t, "ReLUBackwardInto strided", got.Contiguous().Data(), c.out, 0)
		})
	}
	mustPanic(t, func() { ReLUBackward(New(3), New(4)) }, "tensor: ReLUBackward", "[3]", "[4]")
}

// TestScaleInto: the vector kernel's products (ClipGradNorm scales the
// gradients in place with it) are the scalar x·c, bit for bit, over
// lengths that leave tails, with zeros, infinities and NaN.
func TestScaleInto(t *testing.T) {
	rng := rand.New(rand.NewPCG(12, 12))
	for _, n := range []int{1, 31, 32, 33, 100, 1000, 4099} {
		for _, c := range []float32{0.37, 1e-30, 0} {
			x := New(n)
			d := x.Data()
			for i := range d {
				d[i] = float32(rng.NormFloat64() * 1e3)
			}
			if n > 3 {
				d[0], d[1], d[2] = float32(math.Inf(1)), float32(math.NaN()), 0
			}
			want := make([]float32, n)
			for i, v := range d {
				want[i] = v * c
			}
			ScaleInto(x, x, c)
			for i, v := range x.Data() {
				if math.Float32bits(v) != math.Float32bits(want[i]) {
					t.Fatalf("n=%d c=%v: x[%d] = %v, want %v", n, c, i, v, want[i])
				}
			}
		}
	}
}
