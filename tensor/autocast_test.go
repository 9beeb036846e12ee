package tensor

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// bf16Bound is the bound of GemmAs(BFloat16) against the float64 product
// of the float32 operands, for one output with Σ|a||b| = s over k terms.
func bf16Bound(k int, s float64) float64 {
	const u = 0x1p-24
	g := float64(k+2) * u / (1 - float64(k+2)*u)
	return (0x1p-7+0x1p-16+g)*s + 1e-30
}

// refProduct returns a@b and |a|@|b| in float64 for 2-D a, b (any
// strides).
func refProduct(a, b *Tensor) (p, s [][]float64) {
	m, k, n := a.shape[0], a.shape[1], b.shape[1]
	ac, bc := a.Contiguous().Data(), b.Contiguous().Data()
	p, s = make([][]float64, m), make([][]float64, m)
	for i := range m {
		p[i], s[i] = make([]float64, n), make([]float64, n)
		for j := range n {
			for q := range k {
				v := float64(ac[i*k+q]) * float64(bc[q*n+j])
				p[i][j] += v
				s[i][j] += math.Abs(v)
			}
		}
	}
	return p, s
}

// TestGemmAs: the bfloat16 product of float32 tensors (plain, transposed
// views, k over several slabs) within the stated bound of the float64
// product, and Float32 equal to Gemm bit for bit.
func TestGemmAs(t *testing.T) {
	rng := rand.New(rand.NewPCG(42, 1))
	for _, c := range []struct {
		m, k, n    int
		tA, tB     bool
		alpha, bet float32
	}{{1, 1, 1, false, false, 1, 0}, {7, 33, 5, false, true, 1, 0}, {64, 128, 96, true, false, 0.5, 1}, {20, 600, 40, true, true, -1, 0.25}, {0, 3, 4, false, false, 1, 0}, {3, 0, 4, false, false, 1, 0.5}} {
		t.Run(fmt.Sprintf("%dx%dx%d/tA=%v/tB=%v", c.m, c.k, c.n, c.tA, c.tB), func(t *testing.T) {
			mk := func(r, cl int, tr bool) *Tensor {
				if tr {
					x := New(cl, r)
					x.FillNormal(rng, 0, 1)
					return x.T()
				}
				x := New(r, cl)
				x.FillNormal(rng, 0, 1)
				return x
			}
			a, b := mk(c.m, c.k, c.tA), mk(c.k, c.n, c.tB)
			d0 := New(c.m, c.n)
			d0.FillNormal(rng, 0, 1)
			got, f32, want := d0.Clone(), d0.Clone(), d0.Clone()
			GemmAs(BFloat16, got, a, b, c.alpha, c.bet)
			GemmAs(Float32, f32, a, b, c.alpha, c.bet)
			Gemm(want, a, b, c.alpha, c.bet)
			for i, v := range f32.Data() {
				if math.Float32bits(v) != math.Float32bits(want.Data()[i]) {
					t.Fatalf("Float32: [%d] = %v, Gemm gives %v", i, v, want.Data()[i])
				}
			}
			p, s := refProduct(a, b)
			for i := range c.m {
				for j := range c.n {
					cterm := float64(c.bet) * float64(d0.Data()[i*c.n+j])
					ref := float64(c.alpha)*p[i][j] + cterm
					bound := bf16Bound(c.k, math.Abs(float64(c.alpha))*s[i][j]) + float64(c.k+2)*0x1p-24*math.Abs(cterm)
					if d := math.Abs(float64(got.Data()[i*c.n+j]) - ref); !(d <= bound) {
						t.Fatalf("[%d][%d] = %v, want %v (|diff| %.3g > bound %.3g)", i, j, got.Data()[i*c.n+j], ref, d, bound)
					}
				}
			}
		})
	}
}

// TestLinearAs: the bfloat16 forward is its product followed by the bias,
// the residual and the activation in float32, bit for bit, and within the
// product's bound of the float32 layer (ReLU does not widen the error);
// the backward's products within their bounds of the float32 ones, db
// equal.
func TestLinearAs(t *testing.T) {
	rng := rand.New(rand.NewPCG(42, 2))
	const rows, in, out = 37, 300, 45
	x, w, bias, res := New(rows, in), New(out, in), New(out), New(rows, out)
	for _, v := range []*Tensor{x, w, bias, res} {
		v.FillNormal(rng, 0, 1)
	}
	h, h32 := New(rows, out), New(rows, out)
	LinearAs(BFloat16, h, x, w, bias, res, nil, ReLUAct)
	LinearAs(Float32, h32, x, w, bias, res, nil, ReLUAct)
	prod := New(rows, out)
	GemmAs(BFloat16, prod, x, w.T(), 1, 0)
	_, s := refProduct(x, w.T())
	for i := range rows {
		for j := range out {
			v := prod.Data()[i*out+j] + bias.Data()[j]
			v += res.Data()[i*out+j]
			v = max(v, 0)
			got := h.Data()[i*out+j]
			if math.Float32bits(got) != math.Float32bits(v) {
				t.Fatalf("h[%d][%d] = %v, want %v (product, bias, residual, ReLU)", i, j, got, v)
			}
			// The float32 layer's own rounding is within the same γ term.
			if d := math.Abs(float64(got - h32.Data()[i*out+j])); !(d <= 2*bf16Bound(in, s[i][j])+4*0x1p-24*(math.Abs(float64(v))+1)) {
				t.Fatalf("h[%d][%d] = %v, float32 layer %v: |diff| %.3g", i, j, got, h32.Data()[i*out+j], d)
			}
		}
	}

	dy := New(rows, out)
	dy.FillNormal(rng, 0, 1)
	dx, dw, db := LinearBackwardAs(BFloat16, dy, x, w, true)
	dx32, dw32, db32 := LinearBackwardAs(Float32, dy, x, w, true)
	for _, c := range []struct {
		name    string
		got, fp *Tensor
		a, b    *Tensor
		k       int
	}{{"dx", dx, dx32, dy, w, out}, {"dw", dw, dw32, dy.T(), x, rows}} {
		p, s := refProduct(c.a, c.b)
		gd := c.got.Data()
		n := c.got.shape[1]
		for i := range p {
			for j := range p[i] {
				if d := math.Abs(float64(gd[i*n+j]) - p[i][j]); !(d <= bf16Bound(c.k, s[i][j])) {
					t.Fatalf("%s[%d][%d] = %v, want %v (|diff| %.3g > bound %.3g)", c.name, i, j, gd[i*n+j], p[i][j], d, bf16Bound(c.k, s[i][j]))
				}
			}
		}
	}
	for j, v := range db.Data() {
		if v != db32.Data()[j] {
			t.Fatalf("db[%d] = %v, float32 %v", j, v, db32.Data()[j])
		}
	}
}

// TestConv2dAs: the bfloat16 convolutions (plain, ReLU, ReLU+max-pool;
// strides 1 and 2) and their gradients against the float32 ops, within
// the bound of one bfloat16 product per output: Σ|a||b| is the same op on
// absolute values (in float32, a relative 1e-5 of slack for its own
// rounding), k the length of the products.
func TestConv2dAs(t *testing.T) {
	rng := rand.New(rand.NewPCG(rand.Uint64(), 3))
	abs := func(x *Tensor) *Tensor { return Abs(x) }
	within := func(t *testing.T, name string, got, want, s *Tensor, k int) {
		t.Helper()
		g, w, sd := got.Contiguous().Data(), want.Contiguous().Data(), s.Contiguous().Data()
		diff := false
		for i := range g {
			tol := bf16Bound(k, float64(sd[i])*(1+1e-5)) + 4*0x1p-24*math.Abs(float64(w[i]))
			if d := math.Abs(float64(g[i]) - float64(w[i])); !(d <= tol) {
				t.Fatalf("%s[%d] = %v, want %v within %.3g", name, i, g[i], w[i], tol)
			}
			diff = diff || g[i] != w[i]
		}
		if !diff {
			t.Fatalf("%s: equal to float32 bit for bit: the bfloat16 path did not run", name)
		}
	}
	for _, stride := range []int{1, 2} {
		t.Run(fmt.Sprintf("stride=%d", stride), func(t *testing.T) {
			x, w, b := New(2, 3, 10, 9), New(4, 3, 3, 3), New(4)
			x.FillNormal(rng, 0, 1)
			w.FillNormal(rng, 0, 1)
			b.FillNormal(rng, 0, 1)
			k := 3 * 3 * 3
			y16, y32 := Conv2dAs(BFloat16, x, w, b, stride, 1), Conv2d(x, w, b, stride, 1)
			within(t, "Conv2d", y16, y32, Conv2d(abs(x), abs(w), abs(b), stride, 1), k)
			dy := New(y32.Shape()...)
			dy.FillNormal(rng, 0, 1)
			dx16, dw16, db16 := Conv2dBackwardAs(BFloat16, dy, x, w, stride, 1, true)
			dx32, dw32, db32 := Conv2dBackward(dy, x, w, stride, 1, true)
			sx, sw, _ := Conv2dBackward(abs(dy), abs(x), abs(w), stride, 1, true)
			within(t, "dx", dx16, dx32, sx, 4*3*3)
			within(t, "dw", dw16, dw32, sw, dy.Len()/4)
			assertClose(t, "db", db16.Data(), db32.Data(), 1e-5)

			r16 := Conv2dReLUAs(BFloat16, x, w, b, stride, 1)
			for i, v := range r16.Data() {
				if want := max(y16.Data()[i], 0); v != want {
					t.Fatalf("Conv2dReLUAs[%d] = %v, want max(Conv2dAs, 0) = %v", i, v, want)
				}
			}
			p16, arg := Conv2dReLUMaxPool2dAs(BFloat16, x, w, b, stride, 1, 2)
			p32, _ := MaxPool2d(r16, 2, 2, 0)
			assertClose(t, "Conv2dReLUMaxPool2dAs", p16.Data(), p32.Data(), 0)
			dp := New(p16.Shape()...)
			dp.FillNormal(rng, 0, 1)
			// The pooled op's gradients are the ReLU op's on the unpooled
			// gradient (the same bfloat16 products, summed in another order).
			dxp, dwp, _ := Conv2dReLUMaxPool2dBackwardAs(BFloat16, dp, p16, arg, x, w, stride, 1, 2, true)
			dxr, dwr, _ := Conv2dReLUBackwardAs(BFloat16, MaxPool2dBackward(dp, arg, r16.Shape()), r16, x, w, stride, 1, true)
			assertClose(t, "pooled dx", dxp.Data(), dxr.Data(), 1e-5)
			assertClose(t, "pooled dw", dwp.Data(), dwr.Data(), 1e-5)
		})
	}
}
