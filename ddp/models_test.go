package ddp

import (
	"context"
	"fmt"
	"math/rand/v2"

	"github.com/cohortml/cohort/autograd"
	"github.com/cohortml/cohort/distributed"
	"github.com/cohortml/cohort/nn"
	"github.com/cohortml/cohort/tensor"
)

// Small models for the tests, built from autograd ops so that ddp's tests
// depend only on the layers below it.

// testNet is a sequential model: each stage maps x to x.
type testNet struct {
	params  []nn.NamedParameter
	buffers []nn.NamedBuffer
	stages  []func(x *autograd.Var) *autograd.Var
	train   bool
	// probe, when set, runs at the start of every Forward.
	probe func()
}

func (n *testNet) NamedParameters() []nn.NamedParameter { return n.params }
func (n *testNet) NamedBuffers() []nn.NamedBuffer       { return n.buffers }
func (n *testNet) SetTraining(on bool)                  { n.train = on }
func (n *testNet) Forward(x *autograd.Var) *autograd.Var {
	if n.probe != nil {
		n.probe()
	}
	for _, s := range n.stages {
		x = s(x)
	}
	return x
}

func (n *testNet) param(rng *rand.Rand, name string, std float32, shape ...int) *autograd.Var {
	t := tensor.New(shape...)
	t.FillNormal(rng, 0, std)
	v := autograd.NewVar(t, true)
	n.params = append(n.params, nn.NamedParameter{Name: name, Param: v})
	return v
}

// linear appends a Linear(in, out) stage, optionally followed by ReLU.
func (n *testNet) linear(rng *rand.Rand, name string, in, out int, relu bool) {
	w := n.param(rng, name+".weight", 1/float32(in), out, in)
	b := n.param(rng, name+".bias", 0.1, out)
	n.stages = append(n.stages, func(x *autograd.Var) *autograd.Var {
		y := autograd.Linear(x, w, b)
		if relu {
			y = autograd.ReLU(y)
		}
		return y
	})
}

// newMLP is in → hidden… → classes with ReLU between layers.
func newMLP(seed uint64, sizes ...int) *testNet {
	rng := rand.New(rand.NewPCG(seed, 1))
	n := &testNet{train: true}
	for i := 0; i+1 < len(sizes); i++ {
		n.linear(rng, fmt.Sprint(2*i), sizes[i], sizes[i+1], i+2 < len(sizes))
	}
	return n
}

// newCNN takes [N, 1, 8, 8]: Conv(1→4, 3, pad 1)-ReLU-MaxPool(2)-
// Conv(4→6, 3)-ReLU-Flatten(24)-Linear(24→10)-ReLU-Linear(10→classes).
func newCNN(seed uint64, classes int) *testNet {
	rng := rand.New(rand.NewPCG(seed, 2))
	n := &testNet{train: true}
	w1 := n.param(rng, "0.weight", 0.3, 4, 1, 3, 3)
	b1 := n.param(rng, "0.bias", 0.1, 4)
	w2 := n.param(rng, "3.weight", 0.15, 6, 4, 3, 3)
	b2 := n.param(rng, "3.bias", 0.1, 6)
	n.stages = append(n.stages, func(x *autograd.Var) *autograd.Var {
		x = autograd.ReLU(autograd.Conv2d(x, w1, b1, 1, 1))
		x = autograd.MaxPool2d(x, 2, 2, 0)
		x = autograd.ReLU(autograd.Conv2d(x, w2, b2, 1, 0))
		return autograd.Flatten(x)
	})
	n.linear(rng, "6", 24, 10, true)
	n.linear(rng, "8", 10, classes, false)
	return n
}

// newBNNet is Linear-BatchNorm1d-ReLU-Linear with running statistics.
func newBNNet(seed uint64, in, hidden, classes int) *testNet {
	rng := rand.New(rand.NewPCG(seed, 3))
	n := &testNet{train: true}
	n.linear(rng, "0", in, hidden, false)
	g := n.param(rng, "1.weight", 0.1, hidden)
	for i := range g.Value.Data() {
		g.Value.Data()[i] += 1
	}
	b := n.param(rng, "1.bias", 0.1, hidden)
	mean, variance := tensor.New(hidden), tensor.Full(1, hidden)
	// Rank-dependent seeds give every rank different starting statistics.
	mean.FillNormal(rng, 0, 1)
	n.buffers = append(n.buffers, nn.NamedBuffer{Name: "1.running_mean", Buffer: mean}, nn.NamedBuffer{Name: "1.running_var", Buffer: variance})
	n.stages = append(n.stages, func(x *autograd.Var) *autograd.Var {
		return autograd.ReLU(autograd.BatchNorm(x, g, b, mean, variance, autograd.BatchNormOptions{Training: n.train, Momentum: 0.1, Eps: 1e-5}))
	})
	n.linear(rng, "3", hidden, classes, false)
	return n
}

// withUnused adds a parameter the forward pass never touches.
func withUnused(n *testNet, seed uint64) *testNet {
	rng := rand.New(rand.NewPCG(seed, 4))
	n.param(rng, "spare.weight", 0.1, 3, 2)
	return n
}

func snapshotBuffers(m nn.Module) [][]float32 {
	var out [][]float32
	for _, nb := range m.NamedBuffers() {
		out = append(out, append([]float32(nil), nb.Buffer.Data()...))
	}
	return out
}

// dataset is a deterministic classification set.
type dataset struct {
	x      []float32 // n × features
	y      []int64
	shape  []int // per-sample shape
	stride int
}

func newDataset(seed uint64, n, classes int, shape ...int) dataset {
	rng := rand.New(rand.NewPCG(seed, 5))
	stride := 1
	for _, s := range shape {
		stride *= s
	}
	d := dataset{x: make([]float32, n*stride), y: make([]int64, n), shape: shape, stride: stride}
	for i := range d.x {
		d.x[i] = float32(rng.NormFloat64())
	}
	for i := range d.y {
		d.y[i] = int64(rng.IntN(classes))
	}
	return d
}

// batch returns samples [lo, hi) as an input Var and targets.
func (d dataset) batch(lo, hi int) (*autograd.Var, []int64) {
	x := append([]float32(nil), d.x[lo*d.stride:hi*d.stride]...)
	shape := append([]int{hi - lo}, d.shape...)
	return autograd.NewVar(tensor.FromSlice(x, shape...), false), append([]int64(nil), d.y[lo:hi]...)
}

// wrapMLP wraps a 12-16-16-5 MLP drawn from the rank's seed on pg.
func wrapMLP(ctx context.Context, pg distributed.ProcessGroup, o Options) (*testNet, *Model, error) {
	net := newMLP(uint64(pg.Rank()), 12, 16, 16, 5)
	m, err := Wrap(ctx, net, pg, o)
	return net, m, err
}

// pass runs a forward and a backward pass (averaging the gradients) of m
// on samples [lo, hi) of d.
func (d dataset) pass(ctx context.Context, m *Model, lo, hi int) error {
	x, y := d.batch(lo, hi)
	out, err := m.Forward(ctx, x)
	if err != nil {
		return err
	}
	return m.Backward(ctx, loss(out, y))
}

func rngFor(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 9)) }
