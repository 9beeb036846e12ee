package autograd

import (
	"math"
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/cohortml/cohort/tensor"
	"github.com/cohortml/cohort/tensor/tensortest"
)

// recycleChain is a Linear chain as nn.Sequential builds it, with the
// intermediate outputs marked Transient or not, ReLU both fused and
// standalone, and GELU (whose pre-activation is recycled as scratch).
func recycleChain(x *Var, ws, bs []*Var, target []int64, transient bool) *Var {
	h := LinearReLU(x, ws[0], bs[0])
	mark := func(v *Var) {
		if transient {
			Transient(v)
		}
	}
	mark(h)
	h = LinearGELUTanh(h, ws[1], bs[1])
	mark(h)
	h = Linear(h, ws[2], bs[2])
	h = ReLU(h) // standalone: masks its gradient in place and hands it on
	mark(h)
	out := Linear(h, ws[3], bs[3])
	return CrossEntropy(out, target, CrossEntropyOptions{})
}

// classBatch draws a [batch, in] input (needing a gradient when grad is
// set) and batch class targets in [0, 10).
func classBatch(rng *rand.Rand, batch, in int, grad bool) (*Var, []int64) {
	x := NewVar(randn(rng, batch, in), grad)
	target := make([]int64, batch)
	for i := range target {
		target[i] = int64(rng.IntN(10))
	}
	return x, target
}

// linearParams draws the weights and biases of a chain of Linear layers
// of the given widths (sizes[0] in, sizes[len(sizes)-1] out).
func linearParams(rng *rand.Rand, sizes []int) (ws, bs []*Var) {
	for i := 0; i+1 < len(sizes); i++ {
		ws = append(ws, NewVar(randn(rng, sizes[i+1], sizes[i]), true))
		bs = append(bs, NewVar(randn(rng, sizes[i+1]), true))
	}
	return ws, bs
}

// zeroGrads zeroes the gradients of every parameter of every list.
func zeroGrads(lists ...[]*Var) {
	for _, ps := range lists {
		for _, p := range ps {
			p.ZeroGrad()
		}
	}
}

// descend takes a gradient step (rate 0.1) on every parameter of every
// list, so that the next training step's values differ.
func descend(lists ...[]*Var) {
	for _, ps := range lists {
		for _, p := range ps {
			tensor.AddScaled(p.Value, -0.1, p.Grad)
		}
	}
}

// TestRecycleMatchesFresh runs several training steps of a chain whose
// intermediate activations and gradients are recycled into later tensors,
// and checks every gradient bitwise against the same steps with nothing
// recycled: storage handed back too early would be overwritten by a later
// tensor before its last read.
func TestRecycleMatchesFresh(t *testing.T) {
	sizes := []int{48, 96, 80, 64, 10}
	const batch = 33
	type model struct{ ws, bs []*Var }
	build := func() model {
		rng := newRNG(3)
		var m model
		m.ws, m.bs = linearParams(rng, sizes)
		return m
	}
	a, b := build(), build()
	rng := newRNG(4)
	for step := range 4 {
		x, target := classBatch(rng, batch, sizes[0], false)
		zeroGrads(append(a.ws, a.bs...), append(b.ws, b.bs...))
		la := recycleChain(x, a.ws, a.bs, target, true)
		Backward(la)
		lb := recycleChain(x, b.ws, b.bs, target, false)
		Backward(lb)
		if la.Value.Item() != lb.Value.Item() {
			t.Fatalf("step %d: loss %v with recycling, %v without", step, la.Value.Item(), lb.Value.Item())
		}
		for i, p := range append(a.ws, a.bs...) {
			q := append(b.ws, b.bs...)[i]
			pd, qd := p.Grad.Data(), q.Grad.Data()
			for j := range pd {
				if pd[j] != qd[j] {
					t.Fatalf("step %d: parameter %d gradient element %d: %v with recycling, %v without", step, i, j, pd[j], qd[j])
				}
			}
		}
		descend(append(a.ws, a.bs...), append(b.ws, b.bs...))
	}
}

// TestRecycleSteadyStateAllocation: once warm, a step of a Transient
// Linear-ReLU chain takes its activations and gradients from the storage
// the previous step recycled, so it allocates less than one activation.
func TestRecycleSteadyStateAllocation(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector changes allocation")
	}
	const batch, width = 64, 512
	rng := newRNG(5)
	var ws, bs []*Var
	for _, out := range []int{width, width, 10} { // the logits (10 wide) are the caller's, never recycled
		ws = append(ws, NewVar(randn(rng, out, width), true))
		bs = append(bs, NewVar(randn(rng, out), true))
	}
	x := NewVar(randn(rng, batch, width), false)
	target := make([]int64, batch)
	step := func() {
		h := LinearReLU(x, ws[0], bs[0])
		Transient(h)
		h = LinearReLU(h, ws[1], bs[1])
		Transient(h)
		Backward(CrossEntropy(Linear(h, ws[2], bs[2]), target, CrossEntropyOptions{}))
	}
	perStep := bytesPerStep(step)
	activation := uint64(batch * width * 4)
	t.Logf("%d bytes per step (one activation: %d)", perStep, activation)
	if perStep >= activation {
		t.Errorf("%d bytes allocated per steady-state step, want less than one activation (%d bytes)", perStep, activation)
	}
}

// bytesPerStep returns the heap bytes one call of step allocates once
// warm (after three calls): the least of three averages over ten calls.
// A collection during a window can empty sync.Pools (the GEMM's packing
// buffers among them), whose next users allocate again; the least average
// is the steady state without that.
func bytesPerStep(step func()) uint64 {
	for range 3 {
		step()
	}
	const steps = 10
	best := uint64(math.MaxUint64)
	for range 3 {
		var m0, m1 runtime.MemStats
		runtime.ReadMemStats(&m0)
		for range steps {
			step()
		}
		runtime.ReadMemStats(&m1)
		best = min(best, (m1.TotalAlloc-m0.TotalAlloc)/steps)
	}
	return best
}

// scaleOwned is Scale(x, 3) as a custom op: through RecordOwned it scales
// a private gradient in place and hands it on (counting those calls in
// inPlace), a shared one into a fresh tensor; through Record, always a
// fresh tensor.
func scaleOwned(x *Var, owned bool, inPlace *int) *Var {
	y := tensor.Scale(x.Value, 3)
	if !owned {
		return Record("scale", y, []*Var{x}, func(g *tensor.Tensor) []*tensor.Tensor {
			return []*tensor.Tensor{tensor.Scale(g, 3)}
		})
	}
	return RecordOwned("scale", y, true, []*Var{x}, func(g *tensor.Tensor, private bool) []InputGrad {
		if private {
			*inPlace++
			return []InputGrad{{T: tensor.ScaleInto(g, g, 3), Owned: true}}
		}
		return []InputGrad{{T: tensor.Scale(g, 3), Owned: true}}
	})
}

// TestRecordOwned: a custom op recorded with RecordOwned between the
// layers of a Transient chain gets its gradient private (the Linear after
// it made it afresh), works on it in place, and the gradients equal bit
// for bit those of the same op recorded with Record, step after step,
// with storage recycled in between (a premature recycle shows as a
// difference, or as NaN under COHORT_POISON_EMPTY=1).
func TestRecordOwned(t *testing.T) {
	sizes := []int{32, 64, 48, 10}
	rng := newRNG(6)
	wa, ba := linearParams(rng, sizes)
	rng = newRNG(6)
	wb, bb := linearParams(rng, sizes)
	chain := func(x *Var, ws, bs []*Var, target []int64, owned bool, inPlace *int) *Var {
		h := Linear(x, ws[0], bs[0])
		Transient(h)
		h = scaleOwned(h, owned, inPlace)
		Transient(h)
		h = LinearGELUTanh(h, ws[1], bs[1])
		Transient(h)
		return CrossEntropy(Linear(h, ws[2], bs[2]), target, CrossEntropyOptions{})
	}
	inPlace := 0
	data := newRNG(7)
	for step := range 3 {
		x, target := classBatch(data, 40, sizes[0], true)
		x2 := NewVar(x.Value, true)
		zeroGrads(append(wa, ba...), append(wb, bb...))
		Backward(chain(x, wa, ba, target, true, &inPlace))
		Backward(chain(x2, wb, bb, target, false, nil))
		for i, p := range append(append(wa, ba...), x) {
			q := append(append(wb, bb...), x2)[i]
			pd, qd := p.Grad.Data(), q.Grad.Data()
			for j := range pd {
				if pd[j] != qd[j] {
					t.Fatalf("step %d: gradient %d element %d: %v through RecordOwned, %v through Record", step, i, j, pd[j], qd[j])
				}
			}
		}
		descend(append(wa, ba...), append(wb, bb...))
	}
	if inPlace != 3 {
		t.Errorf("the op found its gradient private in %d of 3 steps", inPlace)
	}
}

// TestRecordOwnedValueRecycled: the value of an op that owns it, marked
// Transient, is handed back once Backward has run through the op; one
// that does not own it is not.
func TestRecordOwnedValueRecycled(t *testing.T) {
	const n = 7 * 331 // a size nothing else uses
	for _, owns := range []bool{true, false} {
		w := NewVar(tensor.Full(1, n), true)
		y := RecordOwned("copy", w.Value.Clone(), owns, []*Var{w}, func(g *tensor.Tensor, _ bool) []InputGrad {
			return []InputGrad{{T: g}}
		})
		Transient(y)
		storage := &y.Value.Data()[0]
		Backward(Sum(Mul(y, y)))
		got := tensor.Empty(n)
		if reused := &got.Data()[0] == storage; reused != owns {
			t.Errorf("owns %v: storage reused %v", owns, reused)
		}
	}
}

func TestRecordOwnedMisuse(t *testing.T) {
	w := NewVar(tensor.Full(1, 300), true)
	// The gradient reaches the op through a Record identity, shared:
	// handing it over as owned is refused.
	y := RecordOwned("bad", w.Value.Clone(), true, []*Var{w}, func(g *tensor.Tensor, _ bool) []InputGrad {
		return []InputGrad{{T: g, Owned: true}}
	})
	var log []string
	tensortest.MustPanic(t, func() { Backward(Sum(marker(y, "shared", &log))) }, "autograd: bad backward", "not the op's to hand over")
	w2 := NewVar(tensor.Full(1, 3), true)
	z := RecordOwned("short", w2.Value.Clone(), true, []*Var{w2}, func(*tensor.Tensor, bool) []InputGrad { return nil })
	tensortest.MustPanic(t, func() { Backward(Sum(z)) }, "autograd: short backward returned 0 gradients for 1 inputs")
}
