package autograd

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/cohortml/cohort/tensor"
	"github.com/cohortml/cohort/tensor/tensortest"
)

// splitNet is a small transformer-like graph: a tied embedding, a Linear
// with bias (plain, then fused with GELU and a residual projection), a
// LayerNorm, and the tied table again as the output head.
func splitNet(seed uint64) (x, wte, w1, b1, lnw, lnb *Var, loss func(x *Var) *Var) {
	rng := rand.New(rand.NewPCG(seed, 1))
	p := func(shape ...int) *Var {
		t := tensor.New(shape...)
		t.FillNormal(rng, 0, 0.5)
		return NewVar(t, true)
	}
	wte, w1, b1, lnw, lnb = p(11, 6), p(6, 6), p(6), p(6), p(6)
	x = p(2, 3, 6) // the stage input: a leaf that requires grad, not a weight
	ids := []int64{1, 4, 2, 9, 0, 3}
	tgt := []int64{3, 1, 4, 1, 5, 9}
	loss = func(x *Var) *Var {
		h := Add(x, Embedding(wte, ids, 2, 3))
		h = Add(h, GELUTanh(Linear(h, w1, b1)))
		h = AddLinear(h, LinearGELUTanh(h, w1, b1), w1, nil) // the fused forms, weights reused
		h = LayerNorm(h, lnw, lnb, 1e-5)
		logits := Linear(h, wte, nil)
		return CrossEntropy(Reshape(logits, -1, 11), tgt, CrossEntropyOptions{})
	}
	return
}

// The input pass gives the input's gradient and leaves the weights alone;
// the weight pass then gives the weights what BackwardGrad gives them, and
// fires their hooks only then.
func TestBackwardSplit(t *testing.T) {
	x0, wte0, w10, b10, lnw0, lnb0, loss0 := splitNet(3)
	Backward(loss0(x0))
	x, wte, w1, b1, lnw, lnb, loss := splitNet(3)
	weights := []*Var{wte, w1, b1, lnw, lnb}
	fired := map[*Var]int{}
	for _, w := range weights {
		w.OnGradReady(func(v *Var) { fired[v]++ })
	}
	// A gradient already there is added into, as by Backward.
	lnb.Grad = tensor.Full(1, 6)
	out := loss(x)
	wpass := BackwardSplit(out, tensor.Full(1, out.Value.Shape()...), weights)
	if x.Grad == nil {
		t.Fatal("input pass: no input gradient")
	}
	for i, w := range weights {
		if fired[w] != 0 {
			t.Errorf("weight %d: hook fired in the input pass", i)
		}
		if w != lnb && w.Grad != nil {
			t.Errorf("weight %d: gradient after the input pass", i)
		}
	}
	tensortest.MustPanic(t, func() { Backward(out) }, "already differentiated")
	wpass()
	tensortest.MustPanic(t, wpass, "run twice")
	lnb.Grad = tensor.Sub(lnb.Grad, tensor.Full(1, 6))
	pairs := []struct {
		name      string
		got, want *Var
	}{{"x", x, x0}, {"wte", wte, wte0}, {"w1", w1, w10}, {"b1", b1, b10}, {"ln.weight", lnw, lnw0}, {"ln.bias", lnb, lnb0}}
	for _, p := range pairs {
		if p.name != "x" && fired[p.got] != 1 {
			t.Errorf("%s: hook fired %d times, want 1", p.name, fired[p.got])
		}
		g, w := p.got.Grad.Data(), p.want.Grad.Data()
		for i := range w {
			if math.Abs(float64(g[i]-w[i])) > 1e-6 {
				t.Fatalf("%s grad[%d] = %v, BackwardGrad gives %v", p.name, i, g[i], w[i])
			}
		}
	}
}

// Weights the output does not depend on, or that do not require grad,
// are ignored; a leaf output that is a weight gets its gradient in the
// weight pass.
func TestBackwardSplitEdges(t *testing.T) {
	a := NewVar(tensor.Full(2, 3), true)
	unused := NewVar(tensor.Full(1, 3), true)
	frozen := NewVar(tensor.Full(1, 3), false)
	y := Mul(a, frozen)
	BackwardSplit(y, tensor.Full(1, 3), []*Var{a, unused, frozen})()
	if unused.Grad != nil || frozen.Grad != nil || a.Grad == nil || a.Grad.Data()[0] != 1 {
		t.Errorf("grads: unused %v, frozen %v, a %v", unused.Grad, frozen.Grad, a.Grad)
	}
	w := NewVar(tensor.Full(2, 3), true)
	wp := BackwardSplit(w, tensor.Full(5, 3), []*Var{w})
	if w.Grad != nil {
		t.Error("leaf weight: gradient in the input pass")
	}
	wp()
	if w.Grad == nil || w.Grad.Data()[0] != 5 {
		t.Errorf("leaf weight: gradient %v after the weight pass, want 5s", w.Grad)
	}
	tensortest.MustPanic(t, func() { BackwardSplit(frozen, tensor.Full(1, 3), nil) }, "does not require grad")
}

// TestBackwardSplitRecycles: BackwardSplit recycles storage as Backward
// does (gradients once spent, Transient outputs and scratch after the
// weight pass), and nothing the weight pass still reads is handed out
// early: between the passes the test takes and scribbles over every
// recycled buffer of the activations' sizes (as a pipeline's next
// forward would), and the gradients must still equal, bitwise, those of
// plain Backward with nothing recycled. Once warm, a step allocates less
// than one activation.
func TestBackwardSplitRecycles(t *testing.T) {
	sizes := []int{48, 96, 80, 64, 10}
	const batch = 33
	type model struct{ ws, bs, ln []*Var }
	build := func() model {
		rng := newRNG(3)
		var m model
		m.ws, m.bs = linearParams(rng, sizes)
		m.ln = []*Var{NewVar(randn(rng, sizes[1]), true), NewVar(randn(rng, sizes[1]), true)}
		return m
	}
	params := func(m model) []*Var { return append(append(append([]*Var(nil), m.ws...), m.bs...), m.ln...) }
	chain := func(m model, x *Var, target []int64, transient bool) *Var {
		h := LinearReLU(x, m.ws[0], m.bs[0])
		h = LayerNorm(h, m.ln[0], m.ln[1], 1e-5)
		if transient {
			Transient(h)
		}
		h = LinearGELUTanh(h, m.ws[1], m.bs[1])
		if transient {
			Transient(h)
		}
		h = ReLU(Linear(h, m.ws[2], m.bs[2]))
		return CrossEntropy(Linear(h, m.ws[3], m.bs[3]), target, CrossEntropyOptions{})
	}
	scribble := func() {
		var taken []*tensor.Tensor
		for _, n := range []int{batch * 96, batch * 80, batch * 64, batch * 10} {
			for range 4 {
				e := tensor.Empty(n)
				e.Fill(float32(math.NaN()))
				taken = append(taken, e)
			}
		}
		for _, e := range taken {
			tensor.Recycle(e)
		}
	}
	a, b := build(), build()
	rng := newRNG(4)
	for step := range 4 {
		x, target := classBatch(rng, batch, sizes[0], true)
		zeroGrads(params(a), params(b))
		la := chain(a, x, target, true)
		wpass := BackwardSplit(la, tensor.Full(1), params(a))
		dx := x.Grad.Clone()
		x.ZeroGrad()
		scribble()
		wpass()
		lb := chain(b, x, target, false)
		Backward(lb)
		for i, v := range append(params(a), x) {
			want := append(params(b), x)[i].Grad.Data()
			got := v.Grad.Data()
			if v == x {
				got = dx.Data()
			}
			for j := range want {
				if got[j] != want[j] {
					t.Fatalf("step %d: gradient %d element %d: %v split, %v by Backward", step, i, j, got[j], want[j])
				}
			}
		}
		descend(params(a), params(b))
	}
	if raceEnabled {
		return // the race detector changes allocation
	}
	x := NewVar(randn(rng, batch, sizes[0]), false)
	target := make([]int64, batch)
	split := bytesPerStep(func() { BackwardSplit(chain(a, x, target, true), tensor.Full(1), params(a))() })
	plain := bytesPerStep(func() { Backward(chain(a, x, target, true)) })
	t.Logf("bytes per steady-state step: %d split, %d by Backward", split, plain)
	// Without recycling the split step allocated 3.1× Backward's bytes.
	if split*4 > plain*5 {
		t.Errorf("a steady-state split step allocates %d bytes, more than 1.25× Backward's %d", split, plain)
	}
}
