// Package dptest is the conformance suite every data-parallel wrapper
// passes (ddp, zero's stages, fsdp): Run trains tiny workloads (an MLP, a
// CNN, a two-block GPT) on 1 to 4 ranks and checks the parameters equal
// one process training on the whole batch, then NoSync accumulation,
// unused parameters, Join with uneven inputs (where the wrapper supports
// it), clipping, state-dict round trips and the error cases. A wrapper's
// test adapts its Model to the suite's and calls Run. It also exports what
// the wrappers' own tests share: the deterministic batches (Images,
// Tokens), the GPT and side-layer models, their training loops against
// ddp, the comparisons and the error-case runner. It is imported by tests
// only.
package dptest

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/cohortml/cohort/autograd"
	"github.com/cohortml/cohort/distributed"
	"github.com/cohortml/cohort/distributed/distributedtest"
	"github.com/cohortml/cohort/models"
	"github.com/cohortml/cohort/nn"
	"github.com/cohortml/cohort/optim"
	"github.com/cohortml/cohort/tensor"
)

// RunUnit runs f on x as unit u of the model (a sharded wrapper gathers
// the unit's parameters around it; the others call f(x)).
type RunUnit func(u int, x *autograd.Var, f func(*autograd.Var) *autograd.Var) *autograd.Var

// Forward is a forward pass written against units.
type Forward func(run RunUnit) *autograd.Var

// Model is one rank's wrapped model as the suite drives it.
type Model interface {
	// Call runs a forward pass, as the wrapper's Call does.
	Call(ctx context.Context, f Forward) (*autograd.Var, error)
	// Backward runs the backward pass of loss and the gradient average.
	Backward(ctx context.Context, loss *autograd.Var) error
	// NoSync runs fn with gradient synchronisation off.
	NoSync(fn func() error) error
	Updater
}

// Updater is what every model under test (Model, StepModel) has besides
// its forward and backward passes: the update and the full state.
type Updater interface {
	// ClipGradNorm clips the averaged gradient of the whole model to a
	// 2-norm of maxNorm and returns the norm before clipping.
	ClipGradNorm(ctx context.Context, maxNorm float64) (float64, error)
	// Step runs the optimizer step and zeroes the gradients.
	Step(ctx context.Context) error
	// FullState returns the full parameters and buffers by state-dict key.
	FullState(ctx context.Context) (map[string]*tensor.Tensor, error)
	// LoadFull loads a full state dict (every rank the same).
	LoadFull(ctx context.Context, sd map[string]*tensor.Tensor) error
	Close() error
}

// Joiner is a Model that supports Join with uneven inputs.
type Joiner interface {
	Join(ctx context.Context, body func() error) error
}

// ReplicaModel is a replicating wrapper's model (ddp's) as Replica
// drives it.
type ReplicaModel interface {
	Call(ctx context.Context, forward func() *autograd.Var) (*autograd.Var, error)
	Backward(ctx context.Context, loss *autograd.Var) error
	NoSync(fn func() error) error
	Join(ctx context.Context, body func() error) error
	Close() error
}

// Replica adapts a ReplicaModel, the module it wraps and the optimizer
// over that module's parameters to the suite's Model (and Joiner).
type Replica struct {
	ReplicaModel
	Module nn.Module
	Opt    optim.Optimizer
}

// NewReplica returns m, a ReplicaModel wrapping mod, as a Replica with the
// optimizer o asks for over mod's parameters; on an error it closes m.
func NewReplica(m ReplicaModel, mod nn.Module, o Options) (Model, error) {
	opt, err := o.Optimizer(nn.Parameters(mod))
	if err != nil {
		m.Close()
		return nil, err
	}
	return Replica{ReplicaModel: m, Module: mod, Opt: opt}, nil
}

// Call runs f with every unit run in place.
func (m Replica) Call(ctx context.Context, f Forward) (*autograd.Var, error) {
	return m.ReplicaModel.Call(ctx, func() *autograd.Var {
		return f(func(_ int, x *autograd.Var, g func(*autograd.Var) *autograd.Var) *autograd.Var { return g(x) })
	})
}

// ClipGradNorm clips the module's (averaged, replicated) gradient.
func (m Replica) ClipGradNorm(_ context.Context, maxNorm float64) (float64, error) {
	return optim.ClipGradNorm(nn.Parameters(m.Module), maxNorm, 2)
}

// Step steps the optimizer and zeroes the gradients.
func (m Replica) Step(context.Context) error {
	m.Opt.Step()
	m.Opt.ZeroGrad()
	return nil
}

// FullState returns the module's state dict.
func (m Replica) FullState(context.Context) (map[string]*tensor.Tensor, error) {
	return nn.StateDict(m.Module), nil
}

// LoadFull loads sd into the module.
func (m Replica) LoadFull(_ context.Context, sd map[string]*tensor.Tensor) error {
	return nn.LoadStateDict(m.Module, sd)
}

// Options are what a test asks of Wrap.
type Options struct {
	// Optimizer builds the optimizer over the variables the wrapper steps.
	Optimizer func(vars []*autograd.Var) (optim.Optimizer, error)
	// FindUnusedParameters lets a backward pass leave parameters unused.
	FindUnusedParameters bool
}

// StepModel is a wrapper that owns its forward and backward passes and
// trains whole GPT steps on token batches (layout's trainer, on its
// data-parallel dimension).
type StepModel interface {
	// TrainStep runs the forward and backward passes of this rank's rows
	// (B sequences of T tokens) and averages the gradients.
	TrainStep(ctx context.Context, idx, tgt []int64, B, T int) error
	Updater
}

// Wrapper is a data-parallel wrapper under test: Wrap for one that wraps
// any module, or WrapGPT for a StepModel (which runs the GPT cases only:
// equality, clipping, state and errors).
type Wrapper struct {
	Name string
	// Device is where the suite puts each rank's model (nn.To) and inputs
	// before wrapping it; the zero value is the CPU. The one-process
	// reference always trains on the CPU.
	Device tensor.Device
	// Group, when set, wraps each rank's group before the wrapper sees it
	// (distributedtest.DeviceGroup: a backend that takes device tensors).
	Group func(distributed.ProcessGroup) distributed.ProcessGroup
	// Runner, when set, runs fn once per rank of a world of goroutines in
	// place of distributedtest.Run (a backend's own groups: the nccl
	// backend's over its fake NCCL).
	Runner func(t *testing.T, world int, fn func(t *testing.T, pg distributed.ProcessGroup))
	// Wrap wraps mod on pg. units are mod's units (for wrappers that
	// shard by unit); the others ignore them.
	Wrap func(ctx context.Context, mod nn.Module, units []nn.Module, pg distributed.ProcessGroup, o Options) (Model, error)
	// WrapGPT builds a StepModel of g on pg training B sequences of T
	// tokens per rank and step.
	WrapGPT func(ctx context.Context, g *models.GPT, pg distributed.ProcessGroup, B, T int, o Options) (StepModel, error)
}

// place moves mod to w's device.
func (w Wrapper) place(mod nn.Module) nn.Module {
	if !w.Device.IsCPU() {
		nn.To(mod, w.Device)
	}
	return mod
}

// run is distributedtest.Run with each rank's group wrapped by w.Group.
func (w Wrapper) run(t *testing.T, world int, fn func(t *testing.T, pg distributed.ProcessGroup)) {
	t.Helper()
	runner := distributedtest.Run
	if w.Runner != nil {
		runner = w.Runner
	}
	runner(t, world, func(t *testing.T, pg distributed.ProcessGroup) {
		if w.Group != nil {
			pg = w.Group(pg)
		}
		fn(t, pg)
	})
}

// wrapNew wraps a new model of wl (from seed, on w's device) on pg with
// AdamW, failing t on an error.
func (w Wrapper) wrapNew(t *testing.T, ctx context.Context, wl workload, seed uint64, pg distributed.ProcessGroup) (nn.Module, Model) {
	t.Helper()
	mod := w.place(wl.model(seed))
	m, err := w.Wrap(ctx, mod, wl.units(mod), pg, Options{Optimizer: adamW})
	if err != nil {
		t.Fatalf("rank %d: %v", pg.Rank(), err)
	}
	return mod, m
}

// deviceOf is the device of mod's first parameter.
func deviceOf(mod nn.Module) tensor.Device {
	if ps := mod.NamedParameters(); len(ps) > 0 {
		return ps[0].Param.Value.Device()
	}
	return tensor.CPU
}

// Run runs every case of the suite on w.
func Run(t *testing.T, w Wrapper) {
	if w.Wrap == nil {
		runSteps(t, w)
		return
	}
	t.Run("equal", func(t *testing.T) { testEqual(t, w) })
	t.Run("nosync", func(t *testing.T) { testNoSync(t, w) })
	t.Run("unused", func(t *testing.T) { testUnused(t, w) })
	t.Run("frozen", func(t *testing.T) { testFrozen(t, w) })
	t.Run("join", func(t *testing.T) { testJoin(t, w) })
	t.Run("clip", func(t *testing.T) { testClip(t, w) })
	t.Run("state", func(t *testing.T) { testState(t, w) })
	t.Run("errors", func(t *testing.T) { testErrors(t, w) })
}

const (
	globalBatch = 12 // divisible by every world size tested
	lr          = 1e-2
	wd          = 0.1
	maxNorm     = 0.5
)

func adamW(vars []*autograd.Var) (optim.Optimizer, error) {
	return optim.NewAdamW([]optim.Group{{Params: vars, LR: lr, WeightDecay: wd}}, optim.AdamDefaults())
}

// adam has no weight decay: a parameter whose gradient is zero or absent
// keeps its value, whichever a wrapper leaves for an unused parameter.
func adam(vars []*autograd.Var) (optim.Optimizer, error) {
	return optim.NewAdamW([]optim.Group{{Params: vars, LR: lr}}, optim.AdamDefaults())
}

// A workload is a tiny model, its units and a deterministic global batch
// per step; rank r of N trains on rows [r·G/N, (r+1)·G/N).
type workload struct {
	name  string
	model func(seed uint64) nn.Module
	units func(nn.Module) []nn.Module
	// batch returns the forward pass over rows [lo, hi) of step s's batch
	// through mod, and the loss of its output (the mean over the rows).
	batch func(mod nn.Module, s, lo, hi int) (Forward, func(*autograd.Var) *autograd.Var)
	// tokens returns the inputs and targets of rows [lo, hi) of step s
	// (GPT only: what a StepModel trains on).
	tokens func(s, lo, hi int) (idx, tgt []int64)
}

func plain(u int, x *autograd.Var, f func(*autograd.Var) *autograd.Var) *autograd.Var { return f(x) }

// seqUnits are a Sequential's layers that hold parameters.
func seqUnits(mod nn.Module) []nn.Module {
	var us []nn.Module
	for _, l := range mod.(*nn.Sequential).Layers {
		if m, ok := l.(nn.Module); ok && len(m.NamedParameters()) > 0 {
			us = append(us, m)
		}
	}
	return us
}

func seqForward(seq *nn.Sequential, x *autograd.Var) Forward {
	return func(run RunUnit) *autograd.Var {
		u := 0
		for _, l := range seq.Layers {
			if m, ok := l.(nn.Module); ok && len(m.NamedParameters()) > 0 {
				x = run(u, x, l.Forward)
				u++
			} else {
				x = l.Forward(x)
			}
		}
		return x
	}
}

func imageWorkload(name string, build func(*rand.Rand) *nn.Sequential, shape []int) workload {
	return workload{name: name,
		model: func(seed uint64) nn.Module { return build(rand.New(rand.NewPCG(seed, 2))) },
		units: seqUnits,
		batch: func(mod nn.Module, s, lo, hi int) (Forward, func(*autograd.Var) *autograd.Var) {
			x, ys := Images(s, 7, lo, hi, shape)
			return seqForward(mod.(*nn.Sequential), autograd.NewVar(x.To(deviceOf(mod)), false)), func(out *autograd.Var) *autograd.Var {
				return autograd.CrossEntropy(out, ys, autograd.CrossEntropyOptions{})
			}
		}}
}

func mlp(rng *rand.Rand) *nn.Sequential {
	return nn.NewSequential(nn.NewLinear(rng, 16, 32, true), nn.ReLU{}, nn.NewLinear(rng, 32, 10, true))
}

func cnn(rng *rand.Rand) *nn.Sequential {
	return nn.NewSequential(
		nn.NewConv2d(rng, 1, 4, 3, nn.Conv2dOptions{}), nn.ReLU{}, nn.NewMaxPool2d(2),
		nn.Flatten{}, nn.NewLinear(rng, 36, 10, true))
}

// gptSeqLen is the GPT workload's sequence length.
const gptSeqLen = 4

func gptWorkload() workload {
	const T = gptSeqLen
	cfg := models.GPTConfig{Vocab: 32, Ctx: 8, NLayer: 2, D: 16, NHead: 2}
	tokens := func(s, lo, hi int) (idx, tgt []int64) { return Tokens(s, lo, hi, T, cfg.Vocab) }
	return workload{name: "gpt",
		model:  func(seed uint64) nn.Module { return NewGPT(rand.New(rand.NewPCG(seed, 4)), cfg) },
		units:  GPTUnits,
		tokens: tokens,
		batch: func(mod nn.Module, s, lo, hi int) (Forward, func(*autograd.Var) *autograd.Var) {
			idx, tgt := tokens(s, lo, hi)
			g := mod.(*models.GPT)
			return GPTForward(g, idx, hi-lo, T), func(out *autograd.Var) *autograd.Var { return g.Loss(out, tgt) }
		}}
}

func workloads() []workload {
	return []workload{
		imageWorkload("mlp", mlp, []int{16}),
		imageWorkload("cnn", cnn, []int{1, 8, 8}),
		gptWorkload(),
	}
}

func snapshot(m nn.Module) map[string][]float32 {
	out := map[string][]float32{}
	for k, t := range nn.StateDict(m) {
		out[k] = append([]float32(nil), t.To(tensor.CPU).Contiguous().Data()...)
	}
	return out
}

// fullSnapshot copies m's full state to the CPU, by state-dict key.
func fullSnapshot(ctx context.Context, m interface {
	FullState(context.Context) (map[string]*tensor.Tensor, error)
}) (map[string][]float32, error) {
	sd, err := m.FullState(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string][]float32{}
	for k, t := range sd {
		out[k] = append([]float32(nil), t.To(tensor.CPU).Contiguous().Data()...)
	}
	return out, nil
}

// checkFull fails t unless m's full state equals want (compare); what
// names the check.
func checkFull(t *testing.T, ctx context.Context, m interface {
	FullState(context.Context) (map[string]*tensor.Tensor, error)
}, rank int, what string, want map[string][]float32) {
	t.Helper()
	got, err := fullSnapshot(ctx, m)
	if err != nil {
		t.Fatal(err)
	}
	if err := compare(got, want); err != nil {
		t.Errorf("rank %d: %s: %v", rank, what, err)
	}
}

// compare reports the first tensor whose difference from want has a norm
// above 5e-4 of want's (trajectories equal to float32 rounding: Adam
// magnifies rounding in elements whose second moment is tiny).
func compare(got, want map[string][]float32) error {
	if len(got) != len(want) {
		return fmt.Errorf("%d tensors, want %d", len(got), len(want))
	}
	for k, w := range want {
		g, ok := got[k]
		if !ok || len(g) != len(w) {
			return fmt.Errorf("tensor %q missing or resized", k)
		}
		var d, n float64
		for j := range w {
			e := float64(g[j]) - float64(w[j])
			d += e * e
			n += float64(w[j]) * float64(w[j])
		}
		if math.Sqrt(d) > 5e-4*math.Sqrt(n)+1e-6 {
			return fmt.Errorf("tensor %q: difference norm %g, norm %g", k, math.Sqrt(d), math.Sqrt(n))
		}
	}
	return nil
}

// reference trains w in one process: at step s on rows [0, rows(s)) of
// the batch, backward passes times over the same loss, clipping, AdamW.
func reference(t *testing.T, w workload, steps int, rows func(s int) int, passes int) (map[string][]float32, []float64) {
	return referenceWith(t, w, steps, rows, passes, adamW)
}

func referenceWith(t *testing.T, w workload, steps int, rows func(s int) int, passes int, newOpt func([]*autograd.Var) (optim.Optimizer, error)) (map[string][]float32, []float64) {
	t.Helper()
	mod := w.model(1)
	opt, err := newOpt(nn.Parameters(mod))
	if err != nil {
		t.Fatal(err)
	}
	var norms []float64
	for s := range steps {
		for range passes {
			fwd, loss := w.batch(mod, s, 0, rows(s))
			autograd.Backward(loss(fwd(plain)))
		}
		n, err := optim.ClipGradNorm(nn.Parameters(mod), maxNorm, 2)
		if err != nil {
			t.Fatal(err)
		}
		norms = append(norms, n)
		opt.Step()
		opt.ZeroGrad()
	}
	return snapshot(mod), norms
}

func full(int) int { return globalBatch }

// train runs steps synchronised steps of w on this rank and returns the
// full state and the clip norms.
func train(ctx context.Context, w Wrapper, wl workload, pg distributed.ProcessGroup, o Options, steps int) (map[string][]float32, []float64, error) {
	mod := w.place(wl.model(1))
	if o.Optimizer == nil {
		o.Optimizer = adamW
	}
	m, err := w.Wrap(ctx, mod, wl.units(mod), pg, o)
	if err != nil {
		return nil, nil, err
	}
	defer m.Close()
	n, r := pg.Size(), pg.Rank()
	return trainLoop(ctx, m, steps, func(s int) error {
		fwd, loss := wl.batch(mod, s, r*globalBatch/n, (r+1)*globalBatch/n)
		out, err := m.Call(ctx, fwd)
		if err != nil {
			return err
		}
		return m.Backward(ctx, loss(out))
	})
}

// trainLoop runs steps synchronised steps on m: pass(s) runs step s's
// forward and backward passes, then m clips and steps. It returns the
// full state and the clip norms.
func trainLoop(ctx context.Context, m interface {
	ClipGradNorm(ctx context.Context, maxNorm float64) (float64, error)
	Step(ctx context.Context) error
	FullState(context.Context) (map[string]*tensor.Tensor, error)
}, steps int, pass func(s int) error) (map[string][]float32, []float64, error) {
	var norms []float64
	for s := range steps {
		if err := pass(s); err != nil {
			return nil, nil, err
		}
		nm, err := m.ClipGradNorm(ctx, maxNorm)
		if err != nil {
			return nil, nil, err
		}
		norms = append(norms, nm)
		if err := m.Step(ctx); err != nil {
			return nil, nil, err
		}
	}
	got, err := fullSnapshot(ctx, m)
	return got, norms, err
}

// testEqual: after AdamW steps with global-norm clipping, every rank's
// parameters equal one process's on the whole batch (worlds 1–4; 20 steps
// at world 2, 3 elsewhere).
func testEqual(t *testing.T, w Wrapper) {
	for _, wl := range workloads() {
		equalWorlds(t, w, wl, train)
	}
}

// trainFunc trains wl for steps on this rank and returns the full state
// and the norms ClipGradNorm returned (train, trainSteps).
type trainFunc func(ctx context.Context, w Wrapper, wl workload, pg distributed.ProcessGroup, o Options, steps int) (map[string][]float32, []float64, error)

// trainOne trains wl one step with train and returns the full state,
// failing t on an error.
func trainOne(t *testing.T, ctx context.Context, w Wrapper, wl workload, pg distributed.ProcessGroup, train trainFunc) map[string][]float32 {
	t.Helper()
	saved, _, err := train(ctx, w, wl, pg, Options{}, 1)
	if err != nil {
		t.Fatalf("rank %d: %v", pg.Rank(), err)
	}
	return saved
}

// equalWorlds is testEqual for one workload trained by train (a Model's
// loop or a StepModel's).
func equalWorlds(t *testing.T, w Wrapper, wl workload, train trainFunc) {
	wants := map[int]map[string][]float32{}
	for _, world := range []int{1, 2, 3, 4} {
		steps := 3
		if world == 2 {
			steps = 20
		}
		if wants[steps] == nil {
			wants[steps], _ = reference(t, wl, steps, full, 1)
		}
		want := wants[steps]
		t.Run(fmt.Sprintf("%s/world=%d", wl.name, world), func(t *testing.T) {
			w.run(t, world, func(t *testing.T, pg distributed.ProcessGroup) {
				got, _, err := train(context.Background(), w, wl, pg, Options{}, steps)
				if err != nil {
					t.Fatalf("rank %d: %v", pg.Rank(), err)
				}
				if err := compare(got, want); err != nil {
					t.Errorf("rank %d: %s vs one process: %v", pg.Rank(), w.Name, err)
				}
			})
		})
	}
}

// testNoSync: two microbatches per step, the first under NoSync, give
// the gradients of two backward passes over the whole batch.
func testNoSync(t *testing.T, w Wrapper) {
	const steps, world = 2, 2
	wl := workloads()[0]
	want, _ := reference(t, wl, steps, full, 2)
	w.run(t, world, func(t *testing.T, pg distributed.ProcessGroup) {
		ctx := context.Background()
		mod, m := w.wrapNew(t, ctx, wl, 1, pg)
		defer m.Close()
		lo, hi := pg.Rank()*globalBatch/world, (pg.Rank()+1)*globalBatch/world
		for s := range steps {
			pass := func() error {
				fwd, loss := wl.batch(mod, s, lo, hi)
				out, err := m.Call(ctx, fwd)
				if err != nil {
					return err
				}
				return m.Backward(ctx, loss(out))
			}
			if err := m.NoSync(pass); err != nil {
				t.Fatalf("rank %d: NoSync: %v", pg.Rank(), err)
			}
			if err := pass(); err != nil {
				t.Fatalf("rank %d: %v", pg.Rank(), err)
			}
			if _, err := m.ClipGradNorm(ctx, maxNorm); err != nil {
				t.Fatal(err)
			}
			if err := m.Step(ctx); err != nil {
				t.Fatal(err)
			}
		}
		checkFull(t, ctx, m, pg.Rank(), "NoSync accumulation vs one process", want)
	})
}

// testUnused: with FindUnusedParameters, a layer no step uses keeps its
// values and the others equal one process's (Adam without weight decay:
// a wrapper may leave an unused gradient absent or zero).
func testUnused(t *testing.T, w Wrapper) {
	const steps, world = 2, 2
	base := workloads()[0]
	wl := workload{name: "unused",
		model: func(seed uint64) nn.Module {
			return &WithSide{Seq: base.model(seed).(*nn.Sequential), Side: nn.NewLinear(rand.New(rand.NewPCG(seed, 6)), 16, 10, true)}
		},
		units: func(mod nn.Module) []nn.Module { return append(seqUnits(mod.(*WithSide).Seq), mod.(*WithSide).Side) },
		batch: func(mod nn.Module, s, lo, hi int) (Forward, func(*autograd.Var) *autograd.Var) {
			return base.batch(mod.(*WithSide).Seq, s, lo, hi)
		},
	}
	want, _ := referenceWith(t, wl, steps, full, 1, adam)
	w.run(t, world, func(t *testing.T, pg distributed.ProcessGroup) {
		got, _, err := train(context.Background(), w, wl, pg, Options{FindUnusedParameters: true, Optimizer: adam}, steps)
		if err != nil {
			t.Fatalf("rank %d: %v", pg.Rank(), err)
		}
		if err := compare(got, want); err != nil {
			t.Errorf("rank %d: unused parameters vs one process: %v", pg.Rank(), err)
		}
	})
}

// testFrozen: a frozen layer (no gradient) stays unchanged on every rank
// and the rest trains as in one process.
func testFrozen(t *testing.T, w Wrapper) {
	const steps, world = 3, 2
	base := workloads()[0]
	wl := base
	wl.model = func(seed uint64) nn.Module {
		mod := base.model(seed)
		for _, p := range mod.NamedParameters()[:2] { // the first Linear
			p.Param.SetRequiresGrad(false)
		}
		return mod
	}
	want, _ := reference(t, wl, steps, full, 1)
	init := snapshot(wl.model(1))
	w.run(t, world, func(t *testing.T, pg distributed.ProcessGroup) {
		got, _, err := train(context.Background(), w, wl, pg, Options{}, steps)
		if err != nil {
			t.Fatalf("rank %d: %v", pg.Rank(), err)
		}
		if err := compare(got, want); err != nil {
			t.Errorf("rank %d: frozen layer vs one process: %v", pg.Rank(), err)
		}
		for _, k := range []string{"0.weight", "0.bias"} {
			if err := compare(map[string][]float32{k: got[k]}, map[string][]float32{k: init[k]}); err != nil {
				t.Errorf("rank %d: the frozen layer changed: %v", pg.Rank(), err)
			}
		}
	})
}

// testJoin: rank r of N trains N−r steps inside Join; each step averages
// over the ranks still training, as one process on their rows does, and
// every rank ends with the same parameters (worlds 2 and 3, with and
// without clipping).
func testJoin(t *testing.T, w Wrapper) {
	wl := workloads()[1]
	supported := false
	w.run(t, 1, func(t *testing.T, pg distributed.ProcessGroup) {
		mod := w.place(wl.model(1))
		m, err := w.Wrap(context.Background(), mod, wl.units(mod), pg, Options{Optimizer: adamW})
		if err != nil {
			t.Fatal(err)
		}
		_, supported = m.(Joiner)
		m.Close()
	})
	if !supported {
		t.Skipf("%s does not support Join", w.Name)
	}
	for _, world := range []int{2, 3} {
		for _, clip := range []bool{true, false} {
			t.Run(fmt.Sprintf("world=%d/clip=%v", world, clip), func(t *testing.T) { testJoinCase(t, w, wl, world, clip) })
		}
	}
}

func testJoinCase(t *testing.T, w Wrapper, wl workload, world int, clip bool) {
	stepsOf := func(r int) int { return world - r }
	rows := func(s int) int { return (world - s) * globalBatch / world }
	mod := wl.model(1)
	opt, err := adamW(nn.Parameters(mod))
	if err != nil {
		t.Fatal(err)
	}
	for s := range world {
		fwd, loss := wl.batch(mod, s, 0, rows(s))
		autograd.Backward(loss(fwd(plain)))
		if clip {
			if _, err := optim.ClipGradNorm(nn.Parameters(mod), maxNorm, 2); err != nil {
				t.Fatal(err)
			}
		}
		opt.Step()
		opt.ZeroGrad()
	}
	want := snapshot(mod)
	w.run(t, world, func(t *testing.T, pg distributed.ProcessGroup) {
		ctx := context.Background()
		mod, m := w.wrapNew(t, ctx, wl, 1, pg)
		defer m.Close()
		j := m.(Joiner)
		r := pg.Rank()
		err := j.Join(ctx, func() error {
			for s := range stepsOf(r) {
				fwd, loss := wl.batch(mod, s, r*globalBatch/world, (r+1)*globalBatch/world)
				out, err := m.Call(ctx, fwd)
				if err != nil {
					return err
				}
				if err := m.Backward(ctx, loss(out)); err != nil {
					return err
				}
				if clip {
					if _, err := m.ClipGradNorm(ctx, maxNorm); err != nil {
						return err
					}
				}
				if err := m.Step(ctx); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatalf("rank %d: Join: %v", r, err)
		}
		checkFull(t, ctx, m, r, "Join with uneven inputs vs one process", want)
	})
}

// testClip: ClipGradNorm returns the norm of the whole averaged gradient,
// the one process's, on every rank.
func testClip(t *testing.T, w Wrapper) {
	const steps, world = 2, 3
	for _, wl := range workloads()[1:] {
		_, want := reference(t, wl, steps, full, 1)
		t.Run(wl.name, func(t *testing.T) {
			w.run(t, world, func(t *testing.T, pg distributed.ProcessGroup) {
				_, got, err := train(context.Background(), w, wl, pg, Options{}, steps)
				if err != nil {
					t.Fatalf("rank %d: %v", pg.Rank(), err)
				}
				checkNorms(t, pg.Rank(), got, want)
			})
		})
	}
}

// checkNorms fails unless a rank's clip norms got equal one process's
// (want) to 1e-4 relative.
func checkNorms(t *testing.T, rank int, got, want []float64) {
	t.Helper()
	for s := range want {
		if math.Abs(got[s]-want[s]) > 1e-4*want[s] {
			t.Errorf("rank %d step %d: norm %v, one process %v", rank, s, got[s], want[s])
		}
	}
}

// testState: a full state dict saved after a step loads into a model
// wrapped from other initial values, which then trains on equal to the
// one that saved it.
func testState(t *testing.T, w Wrapper) {
	const world = 2
	for _, wl := range workloads()[1:] {
		t.Run(wl.name, func(t *testing.T) {
			want, _ := reference(t, wl, 1, full, 1)
			w.run(t, world, func(t *testing.T, pg distributed.ProcessGroup) {
				ctx := context.Background()
				saved := trainOne(t, ctx, w, wl, pg, train)
				_, m := w.wrapNew(t, ctx, wl, 99, pg) // other initial values
				defer m.Close()
				sd := loadSaved(t, ctx, m, pg.Rank(), wl, saved, w.Device, want)
				// A state dict missing a key is refused: by every rank, or by
				// a sharded wrapper only on the ranks whose shard holds it.
				delete(sd, firstKey(sd))
				failed := []int64{0}
				if err := m.LoadFull(ctx, sd); err != nil {
					failed[0] = 1
				}
				if err := pg.AllReduce(ctx, distributed.I64(failed), distributed.Sum).Wait(); err != nil {
					t.Fatal(err)
				}
				if failed[0] == 0 {
					t.Errorf("rank %d: LoadFull of a state dict missing a key succeeded on every rank", pg.Rank())
				}
			})
		})
	}
}

// loadSaved loads saved, a full state of wl's model, into rank's m (its
// tensors on dev) and fails t unless m's full state then equals want; it returns
// the state dict it loaded.
func loadSaved(t *testing.T, ctx context.Context, m interface {
	LoadFull(ctx context.Context, sd map[string]*tensor.Tensor) error
	FullState(context.Context) (map[string]*tensor.Tensor, error)
}, rank int, wl workload, saved map[string][]float32, dev tensor.Device, want map[string][]float32) map[string]*tensor.Tensor {
	t.Helper()
	sd := map[string]*tensor.Tensor{}
	for k, x := range nn.StateDict(wl.model(1)) {
		sd[k] = tensor.FromSlice(append([]float32(nil), saved[k]...), x.Shape()...).To(dev)
	}
	if err := m.LoadFull(ctx, sd); err != nil {
		t.Fatalf("rank %d: LoadFull: %v", rank, err)
	}
	checkFull(t, ctx, m, rank, "state round trip", want)
	return sd
}

func firstKey(sd map[string]*tensor.Tensor) string {
	k0 := ""
	for k := range sd {
		if k0 == "" || k < k0 {
			k0 = k
		}
	}
	return k0
}

// testErrors: Wrap rejects models that differ across ranks on every rank,
// naming the rank; a closed model refuses to run.
func testErrors(t *testing.T, w Wrapper) {
	const world = 2
	wl := workloads()[0]
	t.Run("models-differ", func(t *testing.T) {
		w.run(t, world, func(t *testing.T, pg distributed.ProcessGroup) {
			var mod nn.Module = w.place(wl.model(1))
			if pg.Rank() == 1 {
				mod = nn.NewSequential(nn.NewLinear(rand.New(rand.NewPCG(1, 2)), 16, 31, true), nn.ReLU{}, nn.NewLinear(rand.New(rand.NewPCG(1, 2)), 31, 10, true))
			}
			_, err := w.Wrap(context.Background(), mod, seqUnits(mod), pg, Options{Optimizer: adamW})
			if err == nil || !strings.Contains(err.Error(), "rank 1") {
				t.Errorf("rank %d: Wrap of differing models: %v, want an error naming rank 1", pg.Rank(), err)
			}
		})
	})
	t.Run("closed", func(t *testing.T) {
		w.run(t, world, func(t *testing.T, pg distributed.ProcessGroup) {
			ctx := context.Background()
			mod := w.place(wl.model(1))
			m, err := w.Wrap(ctx, mod, wl.units(mod), pg, Options{Optimizer: adamW})
			if err != nil {
				t.Fatal(err)
			}
			if err := m.Close(); err != nil {
				t.Fatal(err)
			}
			fwd, _ := wl.batch(mod, 0, 0, 1)
			if _, err := m.Call(ctx, fwd); err == nil {
				t.Errorf("rank %d: Call after Close succeeded", pg.Rank())
			}
		})
	})
	t.Run("no-optimizer", func(t *testing.T) {
		w.run(t, 1, func(t *testing.T, pg distributed.ProcessGroup) {
			mod := w.place(wl.model(1))
			failing := func([]*autograd.Var) (optim.Optimizer, error) { return nil, errBuild }
			if _, err := w.Wrap(context.Background(), mod, wl.units(mod), pg, Options{Optimizer: failing}); !errors.Is(err, errBuild) {
				t.Errorf("Wrap with a failing optimizer: %v, want it wrapped", err)
			}
		})
	})
}

var errBuild = errors.New("dptest: optimizer build failed")

// runSteps runs the GPT cases on a StepModel; the others need a forward
// pass of the suite's own.
func runSteps(t *testing.T, w Wrapper) {
	wl := gptWorkload()
	t.Run("equal", func(t *testing.T) { equalWorlds(t, w, wl, trainSteps) })
	for _, c := range []string{"nosync", "unused", "frozen", "join"} {
		t.Run(c, func(t *testing.T) { t.Skipf("%s trains whole steps: not supported", w.Name) })
	}
	t.Run("clip", func(t *testing.T) {
		const steps, world = 2, 3
		_, want := reference(t, wl, steps, full, 1)
		w.run(t, world, func(t *testing.T, pg distributed.ProcessGroup) {
			_, got, err := trainSteps(context.Background(), w, wl, pg, Options{}, steps)
			if err != nil {
				t.Fatalf("rank %d: %v", pg.Rank(), err)
			}
			checkNorms(t, pg.Rank(), got, want)
		})
	})
	t.Run("state", func(t *testing.T) {
		const world = 2
		want, _ := reference(t, wl, 1, full, 1)
		w.run(t, world, func(t *testing.T, pg distributed.ProcessGroup) {
			ctx := context.Background()
			saved := trainOne(t, ctx, w, wl, pg, trainSteps)
			B := globalBatch / world
			m, err := w.WrapGPT(ctx, wl.model(99).(*models.GPT), pg, B, gptSeqLen, Options{Optimizer: adamW})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			sd := loadSaved(t, ctx, m, pg.Rank(), wl, saved, tensor.CPU, want)
			delete(sd, firstKey(sd))
			if err := m.LoadFull(ctx, sd); err == nil {
				t.Errorf("rank %d: LoadFull of a state dict missing a key succeeded", pg.Rank())
			}
		})
	})
	t.Run("errors", func(t *testing.T) {
		t.Run("closed", func(t *testing.T) {
			w.run(t, 2, func(t *testing.T, pg distributed.ProcessGroup) {
				ctx := context.Background()
				m, err := w.WrapGPT(ctx, wl.model(1).(*models.GPT), pg, globalBatch/2, gptSeqLen, Options{Optimizer: adamW})
				if err != nil {
					t.Fatal(err)
				}
				if err := m.Close(); err != nil {
					t.Fatal(err)
				}
				idx, tgt := wl.tokens(0, 0, globalBatch/2)
				if err := m.TrainStep(ctx, idx, tgt, globalBatch/2, gptSeqLen); err == nil {
					t.Errorf("rank %d: TrainStep after Close succeeded", pg.Rank())
				}
			})
		})
		t.Run("no-optimizer", func(t *testing.T) {
			w.run(t, 1, func(t *testing.T, pg distributed.ProcessGroup) {
				failing := func([]*autograd.Var) (optim.Optimizer, error) { return nil, errBuild }
				if _, err := w.WrapGPT(context.Background(), wl.model(1).(*models.GPT), pg, globalBatch, gptSeqLen, Options{Optimizer: failing}); !errors.Is(err, errBuild) {
					t.Errorf("WrapGPT with a failing optimizer: %v, want it wrapped", err)
				}
			})
		})
	})
}

// trainSteps is train for a StepModel.
func trainSteps(ctx context.Context, w Wrapper, wl workload, pg distributed.ProcessGroup, o Options, steps int) (map[string][]float32, []float64, error) {
	if o.Optimizer == nil {
		o.Optimizer = adamW
	}
	n, r := pg.Size(), pg.Rank()
	B := globalBatch / n
	m, err := w.WrapGPT(ctx, wl.model(1).(*models.GPT), pg, B, gptSeqLen, o)
	if err != nil {
		return nil, nil, err
	}
	defer m.Close()
	return trainLoop(ctx, m, steps, func(s int) error {
		idx, tgt := wl.tokens(s, r*B, (r+1)*B)
		return m.TrainStep(ctx, idx, tgt, B, gptSeqLen)
	})
}

// The deterministic data and the comparisons the suite trains and checks
// with, exported for the wrappers' own tests, which train larger models
// (models.MLP, models.LeNet, GPT-mini) on the same kind of batches.

// GlobalBatch is the rows of every step's global batch: divisible by every
// world size tested.
const GlobalBatch = globalBatch

// Images returns rows [lo, hi) of step s's global batch of GlobalBatch
// images of the given shape (standard normal pixels, drawn from
// PCG(s, stream)) and their labels in [0, 10).
func Images(s int, stream uint64, lo, hi int, shape []int) (*tensor.Tensor, []int64) {
	rng := rand.New(rand.NewPCG(uint64(s), stream))
	per := 1
	for _, d := range shape {
		per *= d
	}
	xs := make([]float32, GlobalBatch*per)
	for i := range xs {
		xs[i] = float32(rng.NormFloat64())
	}
	ys := make([]int64, GlobalBatch)
	for i := range ys {
		ys[i] = int64(rng.IntN(10))
	}
	return tensor.FromSlice(xs[lo*per:hi*per], append([]int{hi - lo}, shape...)...), ys[lo:hi]
}

// Tokens returns the inputs and targets of rows [lo, hi) of step s's
// global batch of GlobalBatch sequences of T+1 tokens below vocab (drawn
// from PCG(s, 9)); the targets are the inputs shifted by one.
func Tokens(s, lo, hi, T, vocab int) (idx, tgt []int64) {
	rng := rand.New(rand.NewPCG(uint64(s), 9))
	toks := make([]int64, GlobalBatch*(T+1))
	for i := range toks {
		toks[i] = int64(rng.IntN(vocab))
	}
	for b := lo; b < hi; b++ {
		row := toks[b*(T+1) : (b+1)*(T+1)]
		idx = append(idx, row[:T]...)
		tgt = append(tgt, row[1:]...)
	}
	return idx, tgt
}

// WithSide is an MLP beside a side layer that a forward pass may leave
// out (FindUnusedParameters): the buffer its gradient would go to is not
// zeroed between steps, so a step that leaves it out must reduce zeros.
type WithSide struct {
	Seq  *nn.Sequential
	Side *nn.Linear
}

func (m *WithSide) NamedParameters() []nn.NamedParameter {
	return nn.ChildParameters(nn.Child{Name: "mlp", Module: m.Seq}, nn.Child{Name: "side", Module: m.Side})
}
func (m *WithSide) NamedBuffers() []nn.NamedBuffer { return nil }
func (m *WithSide) SetTraining(on bool)            { m.Seq.SetTraining(on) }

// AddSide adds the side layer's output on x to out at odd steps s: steps
// 1 and 3 use the side layer, 0 and 2 leave it out.
func (m *WithSide) AddSide(s int, x, out *autograd.Var) *autograd.Var {
	if s%2 == 1 {
		out = autograd.Add(out, m.Side.Forward(x))
	}
	return out
}

// Forward is m's forward pass at step s.
func (m *WithSide) Forward(s int, x *autograd.Var) *autograd.Var {
	return m.AddSide(s, x, m.Seq.Forward(x))
}

// TrainSide trains a WithSide of 784 inputs steps steps on rows [lo, hi)
// of its batches (Images stream 11): call runs step s's forward pass on x
// through the wrapper, backward the backward pass of the loss, and update
// clips and steps. It returns the first error, naming the step.
func TrainSide(steps, lo, hi int, call func(s int, x *autograd.Var) (*autograd.Var, error),
	backward func(loss *autograd.Var) error, update func() error) error {
	for s := range steps {
		xs, ys := Images(s, 11, lo, hi, []int{784})
		out, err := call(s, autograd.NewVar(xs, false))
		if err != nil {
			return fmt.Errorf("step %d: %w", s, err)
		}
		if err := backward(autograd.CrossEntropy(out, ys, autograd.CrossEntropyOptions{})); err != nil {
			return fmt.Errorf("step %d: %w", s, err)
		}
		if err := update(); err != nil {
			return fmt.Errorf("step %d: %w", s, err)
		}
	}
	return nil
}

// Params copies m's parameters, in m's order.
func Params(m nn.Module) [][]float32 {
	var out [][]float32
	for _, p := range m.NamedParameters() {
		out = append(out, append([]float32(nil), p.Param.Value.Data()...))
	}
	return out
}

// CompareElements reports the first parameter element outside float32
// rounding of want (relative 1e-4, absolute 2e-5, as ddp's equivalence
// tests).
func CompareElements(got, want [][]float32) error {
	for i := range want {
		for j := range want[i] {
			g, w := float64(got[i][j]), float64(want[i][j])
			if math.Abs(g-w) > 2e-5+1e-4*math.Abs(w) {
				return fmt.Errorf("parameter %d element %d: %v, want %v", i, j, g, w)
			}
		}
	}
	return nil
}

// CompareNorms reports the first parameter whose difference from want has
// a norm above 5e-4 of want's: trajectories that agree to float32
// rounding (Adam magnifies rounding differences in elements whose second
// moment is tiny, so single elements may drift further).
func CompareNorms(got, want [][]float32) error {
	for i := range want {
		var d, n float64
		for j := range want[i] {
			e := float64(got[i][j]) - float64(want[i][j])
			d += e * e
			n += float64(want[i][j]) * float64(want[i][j])
		}
		if math.Sqrt(d) > 5e-4*math.Sqrt(n)+1e-6 {
			return fmt.Errorf("parameter %d: difference norm %g, parameter norm %g", i, math.Sqrt(d), math.Sqrt(n))
		}
	}
	return nil
}

// NewGPT builds a GPT of cfg from rng, panicking on a bad cfg (the
// workloads' configurations are constants).
func NewGPT(rng *rand.Rand, cfg models.GPTConfig) *models.GPT {
	g, err := models.NewGPT(rng, cfg)
	if err != nil {
		panic(err)
	}
	return g
}

// GPTUnits are a GPT's blocks: the units a sharded wrapper gathers one at
// a time (the embeddings and the final LayerNorm form the root).
func GPTUnits(mod nn.Module) []nn.Module {
	var us []nn.Module
	for _, b := range mod.(*models.GPT).Blocks {
		us = append(us, b)
	}
	return us
}

// GPTForward is g's forward pass over B sequences of T ids with each block
// run as a unit.
func GPTForward(g *models.GPT, idx []int64, B, T int) Forward {
	return func(run RunUnit) *autograd.Var { return g.ForwardThrough(idx, B, T, run) }
}

// Synced is a replicated data-parallel model (ddp's) as SideReference
// drives it.
type Synced interface {
	Call(ctx context.Context, forward func() *autograd.Var) (*autograd.Var, error)
	Backward(ctx context.Context, loss *autograd.Var) error
}

// SideReference trains ref wrapped by wrap (ddp with
// FindUnusedParameters) under TrainSide, with newOpt's optimizer stepping
// after clipping to a 2-norm of maxNorm, and returns its parameters: what
// a sharded wrapper must give. It fails t on an error.
func SideReference(t testing.TB, ctx context.Context, ref *WithSide, wrap func(*WithSide) (Synced, error),
	newOpt func([]nn.NamedParameter) (optim.Optimizer, error), maxNorm float64, steps, lo, hi int) [][]float32 {
	t.Helper()
	d, err := wrap(ref)
	if err != nil {
		t.Fatal(err)
	}
	opt, err := newOpt(ref.NamedParameters())
	if err != nil {
		t.Fatal(err)
	}
	err = TrainSide(steps, lo, hi, func(s int, x *autograd.Var) (*autograd.Var, error) {
		return d.Call(ctx, func() *autograd.Var { return ref.Forward(s, x) })
	}, func(loss *autograd.Var) error { return d.Backward(ctx, loss) }, func() error {
		if _, err := optim.ClipGradNorm(nn.Parameters(ref), maxNorm, 2); err != nil {
			return err
		}
		opt.Step()
		opt.ZeroGrad()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return Params(ref)
}

// Stepper is a sharded wrapper's model (zero's, fsdp's) as ClipStep
// drives it.
type Stepper interface {
	ClipGradNorm(ctx context.Context, maxNorm, normType float64) (float64, error)
	Step(ctx context.Context) error
	ZeroGrad()
}

// ClipStep ends a step of m: it clips the gradient to a 2-norm of maxNorm,
// steps the optimizer and zeroes the gradient.
func ClipStep(ctx context.Context, m Stepper, maxNorm float64) error {
	if _, err := m.ClipGradNorm(ctx, maxNorm, 2); err != nil {
		return err
	}
	return StepZero(ctx, m)
}

// StepZero steps m's optimizer and zeroes the gradient: the suite's
// Model.Step for a sharded wrapper.
func StepZero(ctx context.Context, m Stepper) error {
	if err := m.Step(ctx); err != nil {
		return err
	}
	m.ZeroGrad()
	return nil
}

// SmallNet is a 4-hidden-3 MLP drawn from PCG(seed, 1): the model of the
// wrappers' error cases.
func SmallNet(seed uint64, hidden int) *nn.Sequential {
	rng := rand.New(rand.NewPCG(seed, 1))
	return nn.NewSequential(nn.NewLinear(rng, 4, hidden, true), nn.ReLU{}, nn.NewLinear(rng, hidden, 3, true))
}

// ErrorCase is a misuse that must fail on every rank of a world of World
// ranks with an error containing Want.
type ErrorCase struct {
	Name  string
	World int
	Wrap  func(ctx context.Context, pg distributed.ProcessGroup) error
	Want  string
}

// RunErrors runs each case as a subtest: every rank's Wrap (given 20 s)
// must fail with its error, and the whole case must end within 30 s.
func RunErrors(t *testing.T, cases []ErrorCase) {
	for _, tt := range cases {
		t.Run(tt.Name, func(t *testing.T) {
			done := make(chan struct{})
			go func() {
				defer close(done)
				distributedtest.Run(t, tt.World, func(t *testing.T, pg distributed.ProcessGroup) {
					ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
					defer cancel()
					if err := tt.Wrap(ctx, pg); err == nil || !strings.Contains(err.Error(), tt.Want) {
						t.Errorf("rank %d: err = %v, want one containing %q", pg.Rank(), err, tt.Want)
					}
				})
			}()
			select {
			case <-done:
			case <-time.After(30 * time.Second):
				t.Fatal("hung")
			}
		})
	}
}
