package models

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/cohortml/cohort/autograd"
	"github.com/cohortml/cohort/internal/fakebackend"
	"github.com/cohortml/cohort/nn"
	"github.com/cohortml/cohort/optim"
	"github.com/cohortml/cohort/tensor"
)

// trainer is one model and its optimizer, on one device.
type trainer struct {
	dev   tensor.Device
	m     nn.Module
	opt   optim.Optimizer
	loss  func(x *tensor.Tensor, targets []int64) *autograd.Var
	clip  float64
	input *tensor.Tensor
}

// step runs one training step on batch (x, targets) and returns the loss
// and the gradient norm before clipping.
func (tr *trainer) step(t *testing.T, x *tensor.Tensor, targets []int64) (float32, float64) {
	t.Helper()
	tr.opt.ZeroGrad()
	var xd *tensor.Tensor
	if x != nil {
		xd = x.To(tr.dev) // the one explicit move of the step
	}
	loss := tr.loss(xd, targets)
	autograd.Backward(loss)
	norm := 0.0
	if tr.clip > 0 {
		var err error
		if norm, err = optim.ClipGradNorm(nn.Parameters(tr.m), tr.clip, 2); err != nil {
			t.Fatal(err)
		}
	}
	tr.opt.Step()
	return loss.Value.To(tensor.CPU).Item(), norm
}

// newClassifier is a trainer of m, moved to dev, with the optimizer
// newOpt builds over its parameters; its loss is the cross-entropy of m's
// output.
func newClassifier(t *testing.T, dev tensor.Device, m nn.Layer, newOpt func([]*autograd.Var) (optim.Optimizer, error), clip float64) *trainer {
	t.Helper()
	nn.To(m, dev)
	opt, err := newOpt(nn.Parameters(m))
	if err != nil {
		t.Fatal(err)
	}
	tr := &trainer{dev: dev, m: m, opt: opt, clip: clip}
	tr.loss = func(x *tensor.Tensor, targets []int64) *autograd.Var {
		return autograd.CrossEntropy(m.Forward(autograd.NewVar(x, false)), targets, autograd.CrossEntropyOptions{})
	}
	return tr
}

// imageBatch draws B standard normal inputs of the given shape and their
// labels in [0, 10) from rng.
func imageBatch(rng *rand.Rand, B int, shape ...int) (*tensor.Tensor, []int64) {
	x := tensor.New(append([]int{B}, shape...)...)
	x.FillNormal(rng, 0, 1)
	targets := make([]int64, B)
	for i := range targets {
		targets[i] = int64(rng.IntN(10))
	}
	return x, targets
}

// sameStep runs step s on batch (x, targets) on cpu and then on dev,
// fails unless their losses and gradient norms agree bit for bit, and
// returns what dev's step moved and ran.
func sameStep(t *testing.T, s int, cpu, dev *trainer, x *tensor.Tensor, targets []int64) fakebackend.Counters {
	t.Helper()
	lc, nc := cpu.step(t, x, targets)
	before := fakebackend.Stats()
	ld, nd := dev.step(t, x, targets)
	moved := fakebackend.Stats().Sub(before)
	if math.Float32bits(lc) != math.Float32bits(ld) || math.Float64bits(nc) != math.Float64bits(nd) {
		t.Fatalf("step %d: loss %g, grad norm %g on the fake device; %g, %g on the CPU", s, ld, nd, lc, nc)
	}
	return moved
}

// sameBits fails unless every parameter of a (on the CPU) equals b's (on
// the fake device) bit for bit.
func sameBits(t *testing.T, a, b nn.Module) {
	t.Helper()
	pa, pb := a.NamedParameters(), b.NamedParameters()
	for i := range pa {
		if d := pb[i].Param.Value.Device(); d != fakebackend.Device(0) {
			t.Fatalf("%s is on %v after training", pb[i].Name, d)
		}
		x, y := pa[i].Param.Value.Values(), pb[i].Param.Value.To(tensor.CPU).Values()
		for j := range x {
			if math.Float32bits(x[j]) != math.Float32bits(y[j]) {
				t.Fatalf("%s[%d] = %g on the fake device, %g on the CPU", pa[i].Name, j, y[j], x[j])
			}
		}
	}
}

// TestMLPOnFakeDeviceEqualsCPU trains the anchor MLP for a few steps
// (AdamW, clipping) on the CPU and on the fake device, which runs the CPU
// twins of every op: losses, gradient norms and parameters must agree bit
// for bit, and each step may move only its input batch in and its loss
// out.
func TestMLPOnFakeDeviceEqualsCPU(t *testing.T) {
	build := func(dev tensor.Device) *trainer {
		return newClassifier(t, dev, MLP(rand.New(rand.NewPCG(7, 8))), func(ps []*autograd.Var) (optim.Optimizer, error) {
			return optim.NewAdamW([]optim.Group{{Params: ps, LR: 1e-3, WeightDecay: 0.01}}, optim.AdamDefaults())
		}, 1)
	}
	cpu, dev := build(tensor.CPU), build(fakebackend.Device(0))
	rng := rand.New(rand.NewPCG(9, 10))
	const B = 16
	for s := range 4 {
		x, targets := imageBatch(rng, B, 784)
		moved := sameStep(t, s, cpu, dev, x, targets)
		if moved.Uploads != 1 || moved.Downloads != 1 || moved.Ops == 0 {
			t.Errorf("step %d: %d uploads, %d downloads, %d ops: want the batch in, the loss out and the rest on the device", s, moved.Uploads, moved.Downloads, moved.Ops)
		}
		if moved.Releases == 0 {
			t.Errorf("step %d: no buffer handed back by autograd's recycling (%d allocated)", s, moved.Allocs)
		}
		t.Logf("step %d: %d ops, %d buffers allocated, %d released", s, moved.Ops, moved.Allocs, moved.Releases)
	}
	sameBits(t, cpu.m, dev.m)
}

// TestGPTOnFakeDeviceEqualsCPU does the same for a small GPT: embeddings,
// LayerNorm, fused attention, GELU-tanh, the tied head and cross-entropy,
// AdamW with clipping.
func TestGPTOnFakeDeviceEqualsCPU(t *testing.T) {
	cfg := GPTConfig{Vocab: 17, Ctx: 8, NLayer: 2, D: 16, NHead: 2}
	const B, T = 3, 8
	build := func(dev tensor.Device) *trainer {
		g, err := NewGPT(rand.New(rand.NewPCG(11, 12)), cfg)
		if err != nil {
			t.Fatal(err)
		}
		nn.To(g, dev)
		opt, err := optim.NewAdamW([]optim.Group{{Params: nn.Parameters(g), LR: 3e-3, WeightDecay: 0.1}}, optim.AdamDefaults())
		if err != nil {
			t.Fatal(err)
		}
		tr := &trainer{dev: dev, m: g, opt: opt, clip: 0.5}
		tr.loss = func(_ *tensor.Tensor, ids []int64) *autograd.Var {
			return g.Loss(g.Forward(ids[:B*T], B, T), ids[B*T:])
		}
		return tr
	}
	cpu, dev := build(tensor.CPU), build(fakebackend.Device(0))
	rng := rand.New(rand.NewPCG(13, 14))
	for s := range 3 {
		ids := make([]int64, 2*B*T)
		for i := range ids {
			ids[i] = int64(rng.IntN(cfg.Vocab))
		}
		moved := sameStep(t, s, cpu, dev, nil, ids)
		if moved.Uploads != 0 || moved.Downloads != 1 {
			t.Errorf("step %d: %d uploads, %d downloads: want only the loss out", s, moved.Uploads, moved.Downloads)
		}
	}
	sameBits(t, cpu.m, dev.m)
}

// TestLeNetOnFakeDeviceMatchesCPU trains LeNet (SGD with momentum) on
// both. On a device the fused convolution-ReLU-pooling op runs as two ops,
// whose bias gradients are summed in another order than the CPU's fused
// op: the runs agree to float32 round-off, not bit for bit.
func TestLeNetOnFakeDeviceMatchesCPU(t *testing.T) {
	build := func(dev tensor.Device) *trainer {
		return newClassifier(t, dev, LeNet(rand.New(rand.NewPCG(15, 16))), func(ps []*autograd.Var) (optim.Optimizer, error) {
			return optim.NewSGD([]optim.Group{{Params: ps, LR: 0.05}}, optim.SGDOptions{Momentum: 0.9})
		}, 0)
	}
	cpu, dev := build(tensor.CPU), build(fakebackend.Device(0))
	rng := rand.New(rand.NewPCG(17, 18))
	const B = 8
	for s := range 3 {
		x, targets := imageBatch(rng, B, 1, 28, 28)
		lc, _ := cpu.step(t, x, targets)
		ld, _ := dev.step(t, x, targets)
		if math.Abs(float64(lc-ld)) > 1e-5*math.Abs(float64(lc)) {
			t.Fatalf("step %d: loss %g on the fake device, %g on the CPU", s, ld, lc)
		}
	}
	pa, pb := cpu.m.NamedParameters(), dev.m.NamedParameters()
	for i := range pa {
		x, y := pa[i].Param.Value.Values(), pb[i].Param.Value.To(tensor.CPU).Values()
		var num, den float64
		for j := range x {
			d := float64(x[j]) - float64(y[j])
			num += d * d
			den += float64(x[j]) * float64(x[j])
		}
		if math.Sqrt(num) > 1e-5*math.Sqrt(den) {
			t.Errorf("%s: ‖dev − cpu‖/‖cpu‖ = %g", pa[i].Name, math.Sqrt(num/den))
		}
	}
}

// MSELoss's gradient on a device equals the CPU's bit for bit.
func TestMSELossOnFakeDevice(t *testing.T) {
	rng := rand.New(rand.NewPCG(19, 20))
	x, y := tensor.New(5, 3), tensor.New(5, 3)
	x.FillNormal(rng, 0, 1)
	y.FillNormal(rng, 0, 1)
	for _, r := range []autograd.Reduction{autograd.ReduceMean, autograd.ReduceSum, autograd.ReduceNone} {
		var grads [2][]float32
		for i, dev := range []tensor.Device{tensor.CPU, fakebackend.Device(0)} {
			xv := autograd.NewVar(x.To(dev), true)
			l := autograd.MSELoss(xv, autograd.NewVar(y.To(dev), false), r)
			autograd.BackwardGrad(l, tensor.FullOn(dev, 1.5, l.Value.Shape()...))
			grads[i] = xv.Grad.To(tensor.CPU).Values()
		}
		for j := range grads[0] {
			if math.Float32bits(grads[0][j]) != math.Float32bits(grads[1][j]) {
				t.Fatalf("%v: gradient %d = %g on the fake device, %g on the CPU", r, j, grads[1][j], grads[0][j])
			}
		}
	}
}
