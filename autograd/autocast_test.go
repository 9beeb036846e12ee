package autograd

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/cohortml/cohort/tensor"
)

// bf16Beta is the bound of one bfloat16 product of float32 operands over
// k terms, relative to Σ|a||b| (tensor/autocast.go): 2⁻⁷ + 2⁻¹⁶ + γ_{k+2}.
func bf16Beta(k int) float64 {
	const u = 0x1p-24
	return 0x1p-7 + 0x1p-16 + float64(k+2)*u/(1-float64(k+2)*u)
}

// freshRNG returns a generator on a new seed, logged so a failure can be
// replayed.
func freshRNG(t *testing.T) *rand.Rand {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	return rand.New(rand.NewPCG(seed, 7))
}

// allClose reports whether a and b (same shape) agree within atol +
// rtol·|b| everywhere.
func allClose(a, b *tensor.Tensor, rtol, atol float64) bool {
	ad, bd := a.Contiguous().Data(), b.Contiguous().Data()
	if len(ad) != len(bd) {
		return false
	}
	for i := range ad {
		if !(math.Abs(float64(ad[i]-bd[i])) <= atol+rtol*math.Abs(float64(bd[i]))) {
			return false
		}
	}
	return true
}

// mat2 returns t's values as rows × cols float64s (the last dimension is
// cols), transposed when tr.
func mat2(t *tensor.Tensor, tr bool) [][]float64 {
	d := t.Contiguous().Data()
	cols := t.Dim(-1)
	rows := len(d) / max(cols, 1)
	out := make([][]float64, rows)
	for i := range out {
		out[i] = make([]float64, cols)
		for j := range out[i] {
			out[i][j] = float64(d[i*cols+j])
		}
	}
	if !tr {
		return out
	}
	tt := make([][]float64, cols)
	for j := range tt {
		tt[j] = make([]float64, rows)
		for i := range rows {
			tt[j][i] = out[i][j]
		}
	}
	return tt
}

// refProduct returns a·b and |a|·|b| in float64.
func refProduct(a, b [][]float64) (p, s [][]float64) {
	m, k, n := len(a), len(b), 0
	if k > 0 {
		n = len(b[0])
	}
	p, s = make([][]float64, m), make([][]float64, m)
	for i := range m {
		p[i], s[i] = make([]float64, n), make([]float64, n)
		for q := range k {
			for j := range n {
				v := a[i][q] * b[q][j]
				p[i][j] += v
				s[i][j] += math.Abs(v)
			}
		}
	}
	return p, s
}

// checkBound checks got (rows × cols, any leading shape folded) against
// want + add within beta·s plus the float32 roundings of the additions
// after the product (4u·(|want|+|add|)).
func checkBound(t *testing.T, name string, got *tensor.Tensor, want, s [][]float64, add func(i, j int) float64, beta float64) {
	t.Helper()
	g := mat2(got, false)
	bad := 0
	for i := range want {
		for j := range want[i] {
			w := want[i][j]
			if add != nil {
				w += add(i, j)
			}
			tol := beta*s[i][j] + 4*0x1p-24*(math.Abs(w)+math.Abs(want[i][j])) + 1e-30
			if d := math.Abs(g[i][j] - w); !(d <= tol) {
				if bad < 3 {
					t.Errorf("%s[%d][%d] = %v, want %v within %.3g (off by %.3g)", name, i, j, g[i][j], w, tol, d)
				}
				bad++
			}
		}
	}
	if bad > 3 {
		t.Errorf("%s: %d elements outside the bound", name, bad)
	}
}

// TestAutocastLinear: Linear, AddLinear, LinearReLU and LinearGELUTanh
// under bfloat16 autocast against the float64 products of the float32
// operands, within the bound of one bfloat16 product for the forward
// value and for both gradient products, on fresh random inputs; the bias
// gradient and the residual's are float32 sums, equal to the float32
// op's; the weight's gradient accumulates into an existing Grad.
func TestAutocastLinear(t *testing.T) {
	for _, c := range []struct {
		name           string
		xShape         []int
		out            int
		bias, residual bool
		act            activation
	}{
		{"linear", []int{9, 33}, 17, true, false, actNone},
		{"linear_3d_nobias", []int{2, 5, 40}, 70, false, false, actNone},
		{"linear_k600", []int{6, 600}, 30, true, false, actNone},
		{"add_linear", []int{3, 4, 24}, 24, true, true, actNone},
		{"linear_relu", []int{20, 16}, 12, true, false, actReLU},
		{"linear_gelu_tanh", []int{20, 16}, 48, true, false, actGELUTanh},
	} {
		t.Run(c.name, func(t *testing.T) {
			rng := freshRNG(t)
			in := c.xShape[len(c.xShape)-1]
			rows := 1
			for _, d := range c.xShape[:len(c.xShape)-1] {
				rows *= d
			}
			x := NewVar(randn(rng, c.xShape...), true)
			w := NewVar(randn(rng, c.out, in), true)
			w.Grad = tensor.Full(1, c.out, in) // the gradient adds onto it
			var b, r *Var
			if c.bias {
				b = NewVar(randn(rng, c.out), true)
			}
			yShape := append(append([]int(nil), c.xShape[:len(c.xShape)-1]...), c.out)
			if c.residual {
				r = NewVar(randn(rng, yShape...), true)
			}
			det := func(v *Var) *Var {
				if v == nil {
					return nil
				}
				return v.Detach()
			}
			y32 := linear(c.name, det(r), x.Detach(), w.Detach(), det(b), c.act)
			restore := Autocast(tensor.BFloat16, w)
			y := linear(c.name, r, x, w, b, c.act)
			restore()
			if allClose(y.Value, y32.Value, 0, 0) {
				t.Fatal("equal to the float32 op bit for bit: the bfloat16 path did not run")
			}
			if y.AutocastDType() != tensor.BFloat16 || w.AutocastDType() != tensor.Float32 {
				t.Fatalf("output autocast %v, weight's after restore %v: want bfloat16, float32", y.AutocastDType(), w.AutocastDType())
			}
			// The pre-activation, bias and residual included, in float64.
			p, s := refProduct(mat2(x.Value, false), mat2(w.Value, true))
			pre := func(i, j int) float64 {
				v := 0.0
				if b != nil {
					v += float64(b.Value.Data()[j])
				}
				if r != nil {
					v += float64(r.Value.Data()[i*c.out+j])
				}
				return v
			}
			beta := bf16Beta(in)
			g := randn(rng, yShape...)
			gh := g // the gradient of the pre-activation
			switch c.act {
			case actNone:
				checkBound(t, "y", y.Value, p, s, pre, beta)
			case actReLU:
				// ReLU is 1-Lipschitz; its mask is the autocast output's.
				yv, ref := mat2(y.Value, false), p
				for i := range yv {
					for j := range yv[i] {
						want := math.Max(ref[i][j]+pre(i, j), 0)
						if d := math.Abs(yv[i][j] - want); d > beta*s[i][j]+1e-6 {
							t.Fatalf("y[%d][%d] = %v, want %v within %.3g", i, j, yv[i][j], want, beta*s[i][j])
						}
					}
				}
				gh = tensor.ReLUBackward(g, y.Value)
			case actGELUTanh:
				// |GELU_tanh'| ≤ 1.13: the bound of the pre-activation grows
				// by that much; the gradient through it is taken from the
				// autocast pre-activation (Linear's, the same product).
				restore := Autocast(tensor.BFloat16, w)
				h := Linear(x.Detach(), w.Detach(), det(b))
				restore()
				hv := mat2(h.Value, false)
				checkBound(t, "pre-activation", h.Value, p, s, pre, beta)
				yv := mat2(y.Value, false)
				hh := tensor.FromSlice(h.Value.Contiguous().Data(), rows, c.out)
				want := mat2(tensor.GELUTanh(hh), false)
				for i := range yv {
					for j := range yv[i] {
						if d := math.Abs(yv[i][j] - want[i][j]); d > 1e-6*(1+math.Abs(want[i][j])) {
							t.Fatalf("y[%d][%d] = %v, GELU_tanh of the pre-activation %v is %v", i, j, yv[i][j], hv[i][j], want[i][j])
						}
					}
				}
				hg := NewVar(hh, true)
				BackwardGrad(GELUTanh(hg), g.Reshape(rows, c.out))
				gh = hg.Grad
			}
			BackwardGrad(y, g)
			gh2 := gh.Reshape(rows, c.out)
			pdx, sdx := refProduct(mat2(gh2, false), mat2(w.Value, false))
			checkBound(t, "dx", x.Grad.Reshape(rows, in), pdx, sdx, nil, bf16Beta(c.out))
			pdw, sdw := refProduct(mat2(gh2, true), mat2(x.Value, false))
			checkBound(t, "dw", w.Grad, pdw, sdw, func(int, int) float64 { return 1 }, bf16Beta(rows))
			if b != nil {
				want := tensor.SumDim(gh2, 0, false)
				if !allClose(b.Grad, want, 1e-5, 1e-5) {
					t.Errorf("bias gradient %v, want the float32 sum %v", b.Grad.Data()[:3], want.Data()[:3])
				}
			}
			if r != nil && !allClose(r.Grad, g, 0, 0) {
				t.Errorf("residual gradient differs from the output gradient")
			}
		})
	}
}

// TestAutocastMatMul: MatMul under autocast (plain, batched, b broadcast
// over a's batch) within one bfloat16 product's bound, both gradients
// too, and MatMul with float32 autocast equal to the float32 op bit for
// bit.
func TestAutocastMatMul(t *testing.T) {
	for _, c := range []struct{ a, b []int }{
		{[]int{7, 30}, []int{30, 9}},
		{[]int{2, 3, 5, 20}, []int{20, 4}},
		{[]int{2, 5, 20}, []int{2, 20, 6}},
	} {
		t.Run(fmt.Sprintf("%v@%v", c.a, c.b), func(t *testing.T) {
			rng := freshRNG(t)
			a, b := NewVar(randn(rng, c.a...), true), NewVar(randn(rng, c.b...), true)
			f32 := MatMul(a, b)
			defer Autocast(tensor.BFloat16, a)()
			y := MatMul(a, b)
			g := randn(rng, y.Shape()...)
			BackwardGrad(y, g)
			ae := a.Value.Expand(append(y.Shape()[:y.Value.Dims()-2:y.Value.Dims()-2], a.Value.Dim(-2), a.Value.Dim(-1))...).Contiguous()
			be := b.Value.Expand(append(y.Shape()[:y.Value.Dims()-2:y.Value.Dims()-2], b.Value.Dim(-2), b.Value.Dim(-1))...).Contiguous()
			m, k, n := a.Value.Dim(-2), a.Value.Dim(-1), b.Value.Dim(-1)
			batch := y.Value.Len() / (m * n)
			gc := g.Contiguous()
			for i := range batch {
				ai := ae.Reshape(-1, k).Narrow(0, i*m, m)
				bi := be.Reshape(-1, n).Narrow(0, i*k, k)
				gi := gc.Reshape(-1, n).Narrow(0, i*m, m)
				p, s := refProduct(mat2(ai, false), mat2(bi, false))
				checkBound(t, fmt.Sprintf("y%d", i), y.Value.Reshape(-1, n).Narrow(0, i*m, m), p, s, nil, bf16Beta(k))
				if a.Value.Dims() == y.Value.Dims() {
					p, s = refProduct(mat2(gi, false), mat2(bi, true))
					checkBound(t, fmt.Sprintf("da%d", i), a.Grad.Reshape(-1, k).Narrow(0, i*m, m), p, s, nil, bf16Beta(n))
				}
			}
			if b.Value.Dims() == 2 && batch > 1 {
				// db sums the batch: one product over the folded rows.
				p, s := refProduct(mat2(ae.Reshape(-1, k), true), mat2(gc.Reshape(-1, n), false))
				checkBound(t, "db", b.Grad, p, s, nil, bf16Beta(batch*m))
			}
			restore := Autocast(tensor.Float32, a)
			if y32 := MatMul(a, b); !allClose(y32.Value, f32.Value, 0, 0) {
				t.Error("MatMul under float32 autocast differs from MatMul")
			}
			restore()
		})
	}
}

// TestAutocastAttention: AttentionQKV and Attention under autocast
// against the float32 ops. Their products compose with a softmax, so the
// check is the measured size of bfloat16 rounding, not a derived bound:
// every value and gradient within 2⁻⁵ of the largest float32 one.
func TestAutocastAttention(t *testing.T) {
	rng := freshRNG(t)
	B, T, d, nHead := 2, 12, 16, 4
	qkv := randn(rng, B, T, 3*d)
	g := randn(rng, B, T, d)
	run := func(dt tensor.DType) (y, dqkv *tensor.Tensor) {
		x := NewVar(qkv.Clone(), true)
		defer Autocast(dt, x)()
		out := AttentionQKV(x, nHead, true)
		BackwardGrad(out, g)
		return out.Value, x.Grad
	}
	y32, d32 := run(tensor.Float32)
	y16, d16 := run(tensor.BFloat16)
	close := func(name string, got, want *tensor.Tensor) {
		t.Helper()
		scale := float64(tensor.Max(tensor.Abs(want)).Item())
		diff := float64(tensor.Max(tensor.Abs(tensor.Sub(got, want))).Item())
		if diff > 0x1p-5*scale {
			t.Errorf("%s: off by %.3g, want within 2⁻⁵ of %.3g", name, diff, scale)
		}
		if diff == 0 {
			t.Errorf("%s: equal to float32 bit for bit: the bfloat16 path did not run", name)
		}
	}
	close("AttentionQKV", y16, y32)
	close("AttentionQKV gradient", d16, d32)

	q, k, v := NewVar(randn(rng, B, nHead, T, 8), true), NewVar(randn(rng, B, nHead, T, 8), true), NewVar(randn(rng, B, nHead, T, 8), true)
	a32 := Attention(q, k, v, true)
	BackwardGrad(a32, tensor.Full(1, a32.Shape()...))
	dq32 := q.Grad.Clone()
	q.Grad = nil
	restore := Autocast(tensor.BFloat16, q)
	a16 := Attention(q, k, v, true)
	restore()
	BackwardGrad(a16, tensor.Full(1, a16.Shape()...))
	close("Attention", a16.Value, a32.Value)
	close("Attention gradient of q", q.Grad, dq32)
}

// TestAutocastConv: the convolution ops under autocast are tensor's
// bfloat16 convolutions (whose bound TestConv2dAs checks), values and
// gradients bit for bit.
func TestAutocastConv(t *testing.T) {
	rng := freshRNG(t)
	x, w, b := randn(rng, 2, 3, 12, 10), randn(rng, 4, 3, 3, 3), randn(rng, 4)
	for _, c := range []struct {
		name string
		op   func(x, w, b *Var) *Var
		ref  func(g *tensor.Tensor) (y, dx, dw *tensor.Tensor)
	}{
		{"conv2d", func(x, w, b *Var) *Var { return Conv2d(x, w, b, 2, 1) }, func(g *tensor.Tensor) (y, dx, dw *tensor.Tensor) {
			dx, dw, _ = tensor.Conv2dBackwardAs(tensor.BFloat16, g, x, w, 2, 1, true)
			return tensor.Conv2dAs(tensor.BFloat16, x, w, b, 2, 1), dx, dw
		}},
		{"conv2d_relu_maxpool2d", func(x, w, b *Var) *Var { return Conv2dReLUMaxPool2d(x, w, b, 1, 1, 2) }, func(g *tensor.Tensor) (y, dx, dw *tensor.Tensor) {
			y, arg := tensor.Conv2dReLUMaxPool2dAs(tensor.BFloat16, x, w, b, 1, 1, 2)
			dx, dw, _ = tensor.Conv2dReLUMaxPool2dBackwardAs(tensor.BFloat16, g, y, arg, x, w, 1, 1, 2, true)
			return y, dx, dw
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			xv, wv, bv := NewVar(x, true), NewVar(w, true), NewVar(b, true)
			restore := Autocast(tensor.BFloat16, wv, bv)
			y := c.op(xv, wv, bv)
			restore()
			g := randn(rng, y.Shape()...)
			BackwardGrad(y, g)
			ry, rdx, rdw := c.ref(g)
			if !allClose(y.Value, ry, 0, 0) || !allClose(xv.Grad, rdx, 0, 0) || !allClose(wv.Grad, rdw, 0, 0) {
				t.Error("value or gradients differ from tensor's bfloat16 convolution")
			}
		})
	}
}
