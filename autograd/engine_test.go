package autograd

import (
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/cohortml/cohort/tensor"
	"github.com/cohortml/cohort/tensor/tensortest"
)

// mlp builds a 3-layer MLP whose layers log when their backward runs, and
// registers a hook on every parameter that logs when it fires.
type mlp struct {
	params []*Var
	names  []string
	log    *[]string
}

func newMLP(rng interface {
	NormFloat64() float64
}, log *[]string) *mlp {
	m := &mlp{log: log}
	dims := []int{6, 5, 4, 3}
	for l := 0; l < 3; l++ {
		w := tensor.New(dims[l+1], dims[l])
		for i := range w.Data() {
			w.Data()[i] = float32(rng.NormFloat64()) * 0.5
		}
		m.params = append(m.params, NewVar(w, true), NewVar(tensor.New(dims[l+1]), true))
		m.names = append(m.names, fmt.Sprintf("w%d", l+1), fmt.Sprintf("b%d", l+1))
	}
	for i, p := range m.params {
		name := m.names[i]
		p.OnGradReady(func(v *Var) { *log = append(*log, "hook "+name) })
	}
	return m
}

// marker passes x through, logging when its backward runs.
func marker(x *Var, name string, log *[]string) *Var {
	return Record("marker", x.Value, []*Var{x}, func(g *tensor.Tensor) []*tensor.Tensor {
		*log = append(*log, "backward "+name)
		return []*tensor.Tensor{g}
	})
}

func (m *mlp) loss(x *tensor.Tensor, target []int64) *Var {
	h := NewVar(x, false)
	for l := 0; l < 3; l++ {
		h = marker(Linear(h, m.params[2*l], m.params[2*l+1]), fmt.Sprintf("layer%d", l+1), m.log)
		if l < 2 {
			h = ReLU(h)
		}
	}
	return CrossEntropy(h, target, CrossEntropyOptions{})
}

func TestHookOrder(t *testing.T) {
	var log []string
	rng := newRNG(1)
	m := newMLP(rng, &log)
	x := randn(rng, 4, 6)
	Backward(m.loss(x, []int64{0, 1, 2, 1}))
	want := []string{
		"backward layer3", "hook w3", "hook b3",
		"backward layer2", "hook w2", "hook b2",
		"backward layer1", "hook w1", "hook b1",
	}
	if !slices.Equal(log, want) {
		t.Fatalf("event order\n got %q\nwant %q", log, want)
	}
}

func TestGradIntoBucketView(t *testing.T) {
	var log []string
	rng := newRNG(2)
	m := newMLP(rng, &log)
	x := randn(rng, 4, 6)
	target := []int64{2, 0, 1, 1}

	// Reference gradients with freshly allocated Grad tensors.
	Backward(m.loss(x, target))
	var ref []*tensor.Tensor
	total := 0
	for _, p := range m.params {
		ref = append(ref, p.Grad.Clone())
		total += p.Value.Len()
	}

	// Now point every Grad into one flat bucket, in reverse order with gaps.
	bucket := make([]float32, total+len(m.params))
	off := 0
	for i := len(m.params) - 1; i >= 0; i-- {
		p := m.params[i]
		n := p.Value.Len()
		p.Grad = tensor.FromSlice(bucket[off:off+n], p.Value.Shape()...)
		off += n + 1
	}
	for pass := 1; pass <= 2; pass++ {
		Backward(m.loss(x, target))
		off = 0
		for i := len(m.params) - 1; i >= 0; i-- {
			n := m.params[i].Value.Len()
			got := bucket[off : off+n]
			for j, w := range ref[i].Data() {
				if d := got[j] - float32(pass)*w; d > 1e-5 || d < -1e-5 {
					t.Fatalf("pass %d: %s[%d] in bucket = %g, want %g", pass, m.names[i], j, got[j], float32(pass)*w)
				}
			}
			if bucket[off+n] != 0 {
				t.Fatalf("pass %d: gap after %s written", pass, m.names[i])
			}
			off += n + 1
		}
	}
	// Zeroing in place keeps the views.
	for _, p := range m.params {
		p.ZeroGrad()
	}
	for i, v := range bucket {
		if v != 0 {
			t.Fatalf("bucket[%d] = %g after ZeroGrad", i, v)
		}
	}
}

func TestSharedLeafHookFiresOnceAfterAllUses(t *testing.T) {
	w := NewVar(tensor.FromSlice([]float32{2}, 1), true)
	var seen []float32
	w.OnGradReady(func(v *Var) { seen = append(seen, v.Grad.Data()[0]) })
	x := NewVar(tensor.FromSlice([]float32{3}, 1), true)
	// y = w·x + w·w·x: dy/dw = x + 2·w·x = 3 + 12 = 15
	y := Sum(Add(Mul(w, x), Mul(Mul(w, w), x)))
	Backward(y)
	if len(seen) != 1 || seen[0] != 15 {
		t.Fatalf("hook saw %v, want one call with grad 15", seen)
	}
	if x.Grad.Data()[0] != 2+4 {
		t.Errorf("dx = %g, want 6", x.Grad.Data()[0])
	}
}

func TestRemoveHook(t *testing.T) {
	w := NewVar(tensor.Full(1, 2), true)
	calls := 0
	remove := w.OnGradReady(func(*Var) { calls++ })
	w.OnGradReady(func(*Var) { calls += 10 })
	Backward(Sum(w))
	remove()
	Backward(Sum(w))
	if calls != 21 {
		t.Fatalf("calls = %d, want 11 then +10", calls)
	}
}

func TestNoGradAndDetach(t *testing.T) {
	w := NewVar(tensor.Full(2, 3), true)
	b := NewVar(tensor.Full(1, 3), true)
	restore := NoGrad(w, b)
	y := Add(Mul(w, w), b)
	if y.RequiresGrad() || !y.IsLeaf() || y.Op() != "" {
		t.Fatalf("op under NoGrad recorded: requiresGrad=%v leaf=%v op=%q", y.RequiresGrad(), y.IsLeaf(), y.Op())
	}
	restore()
	restore()
	if !w.RequiresGrad() || !b.RequiresGrad() {
		t.Fatalf("restore did not switch tracking back on")
	}
	y = Add(Mul(w, w.Detach()), b)
	if y.IsLeaf() || y.Op() != "Add" {
		t.Fatalf("tracked op not recorded")
	}
	Backward(Sum(y))
	if got := w.Grad.Data()[0]; got != 2 {
		t.Errorf("gradient through a detached factor: %g, want 2 (w·detach(w))", got)
	}
	tensortest.MustPanic(t, func() { y.SetRequiresGrad(false) }, "autograd", "non-leaf")
}

func TestUnusedLeafGetsZeroGrad(t *testing.T) {
	a := NewVar(tensor.Full(1, 2), true)
	b := NewVar(tensor.Full(1, 2), true)
	fired := false
	b.OnGradReady(func(*Var) { fired = true })
	// b reaches the graph only through a op whose backward returns nil.
	y := Record("first", a.Value.Clone(), []*Var{a, b}, func(g *tensor.Tensor) []*tensor.Tensor {
		return []*tensor.Tensor{g, nil}
	})
	Backward(Sum(y))
	if b.Grad == nil || b.Grad.Data()[0] != 0 || !fired {
		t.Fatalf("unused leaf: grad %v, hook fired %v; want zero grad and a hook", b.Grad, fired)
	}
}

func TestBackwardMisuse(t *testing.T) {
	w := NewVar(tensor.Full(1, 2), true)
	tensortest.MustPanic(t, func() { Backward(Mul(w, w)) }, "autograd", "non-scalar", "[2]")
	tensortest.MustPanic(t, func() { Backward(NewVar(tensor.Scalar(1), false)) }, "does not require grad")
	y := Sum(Mul(w, w))
	Backward(y)
	tensortest.MustPanic(t, func() { Backward(y) }, "already differentiated")
	bad := Record("bad", tensor.New(2), []*Var{w}, func(g *tensor.Tensor) []*tensor.Tensor {
		return []*tensor.Tensor{tensor.New(3)}
	})
	tensortest.MustPanic(t, func() { Backward(Sum(bad)) }, "bad backward", "[3]", "[2]")
	tensortest.MustPanic(t, func() { Linear(NewVar(tensor.New(2, 3), false), w, nil) }, "autograd: Linear", "[2 3]", "[2]")
	tensortest.MustPanic(t, func() { CrossEntropy(NewVar(tensor.New(2, 3), true), []int64{0, 3}, CrossEntropyOptions{}) }, "CrossEntropy", "target 3", "position 1")
}

func TestCrossEntropyAllIgnoredIsNaN(t *testing.T) {
	l := CrossEntropy(NewVar(tensor.New(2, 3), true), []int64{-100, -100}, CrossEntropyOptions{Ignore: true, IgnoreIndex: -100})
	if v := l.Value.Item(); v == v {
		t.Fatalf("mean over no samples = %g, want NaN", v)
	}
}

func TestBatchNormRunningStats(t *testing.T) {
	x := tensor.FromSlice([]float32{1, 2, 3, 4, 5, 6, 7, 8}, 2, 2, 2) // channel 0: 1,2,5,6; channel 1: 3,4,7,8
	rm, rv := tensor.New(2), tensor.Full(1, 2)
	BatchNorm(NewVar(x, false), nil, nil, rm, rv, BatchNormOptions{Training: true, Momentum: 0.1, Eps: 1e-5})
	// means 3.5 and 5.5; unbiased variance of {1,2,5,6} = 17/3
	want := []float32{0.35, 0.55}
	wantV := []float32{0.9 + 0.1*17.0/3, 0.9 + 0.1*17.0/3}
	for c := 0; c < 2; c++ {
		if d := rm.Data()[c] - want[c]; d > 1e-6 || d < -1e-6 {
			t.Errorf("running mean[%d] = %g, want %g", c, rm.Data()[c], want[c])
		}
		if d := rv.Data()[c] - wantV[c]; d > 1e-6 || d < -1e-6 {
			t.Errorf("running var[%d] = %g, want %g", c, rv.Data()[c], wantV[c])
		}
	}
}

// TestWeightReadyBeforeInputGradient checks that a Linear's weight and
// bias hooks run before it computes its input's gradient, so a DDP bucket
// all-reduce can start while that product is still to be done.
func TestWeightReadyBeforeInputGradient(t *testing.T) {
	rng := newRNG(3)
	x := NewVar(randn(rng, 4, 3), true)
	w := NewVar(randn(rng, 2, 3), true)
	b := NewVar(randn(rng, 2), true)
	for pass := 0; pass < 2; pass++ { // second pass: Grads exist, written in place
		var log []string
		var removes []func()
		for name, v := range map[string]*Var{"x": x, "w": w, "b": b} {
			removes = append(removes, v.OnGradReady(func(*Var) { log = append(log, name) }))
		}
		Backward(Sum(Linear(x, w, b)))
		for _, r := range removes {
			r()
		}
		if want := []string{"w", "b", "x"}; !slices.Equal(log, want) {
			t.Fatalf("pass %d: hook order %q, want %q", pass, log, want)
		}
	}
}

// TestOnBackward: the marker calls f once, before the backward of the op
// below it, and leaves the gradients bitwise as they are without it.
func TestOnBackward(t *testing.T) {
	rng := newRNG(7)
	x := NewVar(randn(rng, 16, 24), true)
	w, b := NewVar(randn(rng, 32, 24), true), NewVar(randn(rng, 32), true)
	target := make([]int64, 16)
	for i := range target {
		target[i] = int64(i % 32)
	}
	Backward(CrossEntropy(LinearReLU(x, w, b), target, CrossEntropyOptions{}))
	want := []*tensor.Tensor{x.Grad.Clone(), w.Grad.Clone(), b.Grad.Clone()}
	for _, v := range []*Var{x, w, b} {
		v.ZeroGrad()
		v.Grad = nil
	}
	calls := 0
	h := OnBackward("tap", LinearReLU(x, w, b), func() {
		calls++
		if w.Grad != nil {
			t.Error("f ran after the backward of the op below it")
		}
	})
	Backward(CrossEntropy(h, target, CrossEntropyOptions{}))
	if calls != 1 {
		t.Fatalf("f ran %d times, want 1", calls)
	}
	for i, v := range []*Var{x, w, b} {
		for j, g := range v.Grad.Data() {
			if g != want[i].Data()[j] {
				t.Fatalf("input %d gradient %d: %v with the marker, %v without", i, j, g, want[i].Data()[j])
			}
		}
	}
	if y := OnBackward("tap", NewVar(randn(rng, 2), false), func() { t.Error("called") }); y.RequiresGrad() {
		t.Error("a marker on a Var without gradient requires grad")
	}
}

// TestSetGradBuffer: gradients delivered into buffers installed with
// SetGradBuffer over garbage (NaN) equal, bitwise, those delivered into
// fresh Grads, through every path a leaf's gradient takes (a GEMM into
// the weight, the bias sum, an embedding's rows, a broadcast elementwise
// gradient, a leaf used twice, a gradient handed over whole); a second
// pass adds to the first; a leaf the pass never reaches reports
// GradWritten false and keeps its buffer untouched.
func TestSetGradBuffer(t *testing.T) {
	rng := newRNG(5)
	w1, b1 := NewVar(randn(rng, 5, 4), true), NewVar(randn(rng, 5), true)
	emb := NewVar(randn(rng, 7, 4), true)
	scale := NewVar(randn(rng, 5), true) // broadcast over rows, used twice
	direct := NewVar(randn(rng, 3, 5), true)
	unused := NewVar(randn(rng, 2), true)
	leaves := []*Var{w1, b1, emb, scale, direct, unused}
	loss := func() *Var {
		x := Embedding(emb, []int64{1, 4, 4}, 3)   // [3, 4]
		h := Linear(x, w1, b1)                     // [3, 5]
		h = Mul(Add(h, scale), Add(direct, scale)) // scale twice, direct elementwise
		return Mean(Mul(h, h))
	}
	passes := func(install bool) [][]float32 {
		var bufs []*tensor.Tensor
		for _, v := range leaves {
			v.Grad = nil
			if install {
				b := tensor.New(v.Value.Shape()...)
				for i := range b.Data() {
					b.Data()[i] = float32(math.NaN())
				}
				v.SetGradBuffer(b)
				bufs = append(bufs, b)
				if v.GradWritten() {
					t.Fatalf("GradWritten true right after SetGradBuffer")
				}
			}
		}
		var out [][]float32
		for range 2 {
			Backward(loss())
			for i, v := range leaves[:len(leaves)-1] {
				if !v.GradWritten() {
					t.Fatalf("leaf %d: GradWritten false after the pass", i)
				}
				if install && v.Grad != bufs[i] {
					t.Fatalf("leaf %d: Grad replaced instead of written into the buffer", i)
				}
				out = append(out, slices.Clone(v.Grad.Data()))
			}
		}
		if install {
			if unused.GradWritten() || !math.IsNaN(float64(unused.Grad.Data()[0])) {
				t.Fatalf("unreached leaf: GradWritten %v, buffer %v", unused.GradWritten(), unused.Grad.Data())
			}
		}
		return out
	}
	want, got := passes(false), passes(true)
	for i := range want {
		for j := range want[i] {
			if math.Float32bits(got[i][j]) != math.Float32bits(want[i][j]) {
				t.Fatalf("gradient %d[%d]: %v into a buffer, %v into a fresh Grad", i, j, got[i][j], want[i][j])
			}
		}
	}
	tensortest.MustPanic(t, func() { w1.SetGradBuffer(tensor.New(4, 5)) }, "SetGradBuffer", "[4 5]", "[5 4]")
}

// TestLeafOpRunsWhenReady: an op on a parameter alone (a mask of the
// bias, as GPT's attention applies to its qkv bias) runs as soon as its
// consumer's backward has, so that the parameter's hook fires then, not
// after the layers below it: a data-parallel wrapper launches the
// parameter's bucket while backward goes on.
func TestLeafOpRunsWhenReady(t *testing.T) {
	var log []string
	rng := newRNG(3)
	m := newMLP(rng, &log)
	x := randn(rng, 4, 6)
	h := NewVar(x, false)
	for l := 0; l < 3; l++ {
		b := m.params[2*l+1]
		if l == 2 {
			b = marker(b, "mask of b3", &log) // depth 1: an op on the leaf alone
		}
		h = marker(Linear(h, m.params[2*l], b), fmt.Sprintf("layer%d", l+1), &log)
		if l < 2 {
			h = ReLU(h)
		}
	}
	Backward(CrossEntropy(h, []int64{2, 0, 1, 1}, CrossEntropyOptions{}))
	at := func(s string) int {
		i := slices.Index(log, s)
		if i < 0 {
			t.Fatalf("%q not in the log %q", s, log)
		}
		return i
	}
	if !(at("backward layer3") < at("hook b3") && at("hook b3") < at("backward layer2")) {
		t.Errorf("b3's hook fired at %d, want between layer3's backward (%d) and layer2's (%d): %q",
			at("hook b3"), at("backward layer3"), at("backward layer2"), log)
	}
}
