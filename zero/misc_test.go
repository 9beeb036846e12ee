package zero

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"github.com/cohortml/cohort/autograd"
	"github.com/cohortml/cohort/ddp"
	"github.com/cohortml/cohort/distributed"
	"github.com/cohortml/cohort/distributed/distributedtest"
	"github.com/cohortml/cohort/internal/dp/dptest"
	"github.com/cohortml/cohort/nn"
	"github.com/cohortml/cohort/optim"
	"github.com/cohortml/cohort/tensor"
)

// TestOptimizerMemory: each rank's optimizer state is 1/N of the whole
// (within 1 %), and Stage2 keeps only a 1/N gradient shard between steps.
func TestOptimizerMemory(t *testing.T) {
	w := workloads()[0] // the anchor MLP
	var total int64
	for _, p := range w.model().NamedParameters() {
		total += 2 * 4 * int64(p.Param.Value.Len()) // AdamW: exp_avg, exp_avg_sq
	}
	for _, world := range []int{2, 3, 4} {
		for _, stage := range []Stage{Stage1, Stage2} {
			t.Run(fmt.Sprintf("%v/world=%d", stage, world), func(t *testing.T) {
				distributedtest.Run(t, world, func(t *testing.T, pg distributed.ProcessGroup) {
					_, m, err := trainZero(context.Background(), w, pg, Options{Stage: stage}, 1, false)
					if err != nil {
						t.Fatal(err)
					}
					mem := m.Memory()
					want := float64(total) / float64(world)
					if got := float64(mem.OptimizerBytes); math.Abs(got-want) > 0.01*want {
						t.Errorf("rank %d: optimizer state %d bytes, want %.0f ± 1%%", pg.Rank(), mem.OptimizerBytes, want)
					}
					if stage == Stage2 {
						if got, want := float64(mem.GradBytes), float64(total)/2/float64(world); math.Abs(got-want) > 0.01*want {
							t.Errorf("rank %d: Stage2 keeps %d gradient bytes, want %.0f ± 1%%", pg.Rank(), mem.GradBytes, want)
						}
					}
				})
			})
		}
	}
}

// TestWrapErrors: bad input fails at once on every rank with an error
// naming the culprit, and nothing hangs.
func TestWrapErrors(t *testing.T) {
	dptest.RunErrors(t, []dptest.ErrorCase{
		{Name: "optimizer on full parameters", World: 2, Wrap: func(ctx context.Context, pg distributed.ProcessGroup) error {
			net := dptest.SmallNet(1, 5)
			_, err := Wrap(ctx, net, pg, Options{Optimizer: func([]nn.NamedParameter) (optim.Optimizer, error) {
				return optim.NewAdamW([]optim.Group{{Params: nn.Parameters(net), LR: 1e-3}}, optim.AdamDefaults())
			}})
			return err
		}, Want: `built on the full parameters (it zeroes the gradient of "0.weight")`},
		{Name: "optimizer missing part of the shard", World: 1, Wrap: func(ctx context.Context, pg distributed.ProcessGroup) error {
			_, err := Wrap(ctx, dptest.SmallNet(1, 5), pg, Options{Optimizer: func(s []nn.NamedParameter) (optim.Optimizer, error) {
				return optim.NewSGD([]optim.Group{{Params: Vars(s[1:]), LR: 0.1}}, optim.SGDOptions{})
			}})
			return err
		}, Want: "does not cover this rank's shard"},
		{Name: "models differ", World: 3, Wrap: func(ctx context.Context, pg distributed.ProcessGroup) error {
			hidden := 5
			if pg.Rank() == 2 {
				hidden = 6
			}
			_, err := Wrap(ctx, dptest.SmallNet(1, hidden), pg, Options{Stage: Stage1, Optimizer: adamW})
			return err
		}, Want: `rank 2 has parameter "0.weight" float32[6 4]`},
		{Name: "no optimizer", World: 1, Wrap: func(ctx context.Context, pg distributed.ProcessGroup) error {
			_, err := Wrap(ctx, dptest.SmallNet(1, 5), pg, Options{})
			return err
		}, Want: "Options.Optimizer is nil"},
		{Name: "stage 3", World: 1, Wrap: func(ctx context.Context, pg distributed.ProcessGroup) error {
			_, err := Wrap(ctx, dptest.SmallNet(1, 5), pg, Options{Stage: 3, Optimizer: adamW})
			return err
		}, Want: "fsdp"},
		{Name: "backward without call", World: 2, Wrap: func(ctx context.Context, pg distributed.ProcessGroup) error {
			m, net, x, err := wrapSmall(ctx, pg)
			if err != nil {
				return err
			}
			return m.Backward(ctx, autograd.CrossEntropy(net.Forward(x), []int64{0, 1}, autograd.CrossEntropyOptions{}))
		}, Want: "no Forward"},
		{Name: "unused parameter", World: 2, Wrap: func(ctx context.Context, pg distributed.ProcessGroup) error {
			m, net, x, err := wrapSmall(ctx, pg)
			if err != nil {
				return err
			}
			out, err := m.Call(ctx, func() *autograd.Var { return net.Layers[0].Forward(x) })
			if err != nil {
				return err
			}
			return m.Backward(ctx, autograd.Sum(out))
		}, Want: `received no gradient in this step: "2.weight", "2.bias"`},
	})
}

// wrapSmall wraps the error cases' net (dptest.SmallNet) on pg, and
// returns a batch of two inputs for it.
func wrapSmall(ctx context.Context, pg distributed.ProcessGroup) (*Model, *nn.Sequential, *autograd.Var, error) {
	net := dptest.SmallNet(1, 5)
	m, err := Wrap(ctx, net, pg, Options{Optimizer: adamW})
	return m, net, autograd.NewVar(randTensor(2, 4), false), err
}

func randTensor(shape ...int) *tensor.Tensor {
	rng := rand.New(rand.NewPCG(5, 5))
	t := tensor.New(shape...)
	for i := range t.Data() {
		t.Data()[i] = float32(rng.NormFloat64())
	}
	return t
}

// TestPlainBackwardAndNoSync: autograd.Backward instead of Model.Backward
// gives the same parameters; NoSync accumulation equals one step over the
// concatenated batches.
func TestPlainBackwardAndNoSync(t *testing.T) {
	w := workloads()[1] // LeNet
	const steps = 3
	for _, stage := range []Stage{Stage1, Stage2} {
		t.Run(stage.String(), func(t *testing.T) {
			distributedtest.Run(t, 2, func(t *testing.T, pg distributed.ProcessGroup) {
				ctx := context.Background()
				want, _, err := trainZero(ctx, w, pg, Options{Stage: stage}, steps, false)
				if err != nil {
					t.Fatal(err)
				}
				got, _, err := trainZero(ctx, w, pg, Options{Stage: stage}, steps, true)
				if err != nil {
					t.Fatal(err)
				}
				if err := dptest.CompareElements(got, want); err != nil {
					t.Errorf("rank %d: plain autograd.Backward: %v", pg.Rank(), err)
				}
				// NoSync: each rank's 6 rows in two micro-batches of 3,
				// losses halved so that the sum is the mean over 6; and
				// the same with both micro-batches synchronised, whose
				// averaged gradients accumulate as in PyTorch.
				for _, synced := range []bool{false, true} {
					if err := accumulate(ctx, w, pg, stage, steps, synced, false, want); err != nil {
						t.Errorf("rank %d: synced %v: %v", pg.Rank(), synced, err)
					}
				}
				// Forward passes without backward (validation) before
				// each step change nothing.
				if err := accumulate(ctx, w, pg, stage, steps, false, true, want); err != nil {
					t.Errorf("rank %d: with evaluation passes: %v", pg.Rank(), err)
				}
			})
		})
	}
}

// accumulate trains steps steps of two micro-batches each (the first
// under NoSync unless synced; after two forward passes without backward
// if evals) and compares the parameters with want.
func accumulate(ctx context.Context, w workload, pg distributed.ProcessGroup, stage Stage, steps int, synced, evals bool, want [][]float32) error {
	mod := w.model()
	m, err := Wrap(ctx, mod, pg, Options{Stage: stage, Optimizer: adamW})
	if err != nil {
		return err
	}
	r := pg.Rank()
	for s := range steps {
		lo := r * globalBatch / 2
		micro := func(a, b int) (*autograd.Var, error) {
			fwd, loss := w.batch(mod, s, a, b)
			out, err := m.Call(ctx, fwd)
			if err != nil {
				return nil, err
			}
			return autograd.Scale(loss(out), 0.5), nil
		}
		for e := 0; evals && e < 2; e++ {
			fwd, loss := w.batch(mod, 100+e, lo, lo+6)
			out, err := m.Call(ctx, fwd)
			if err != nil {
				return err
			}
			loss(out)
		}
		first := func() error {
			l, err := micro(lo, lo+3)
			if err != nil {
				return err
			}
			return m.Backward(ctx, l)
		}
		var err error
		if synced {
			err = first()
		} else {
			err = m.NoSync(first)
		}
		if err != nil {
			return err
		}
		l, err := micro(lo+3, lo+6)
		if err != nil {
			return err
		}
		if err := m.Backward(ctx, l); err != nil {
			return err
		}
		if err := dptest.ClipStep(ctx, m, maxNorm); err != nil {
			return err
		}
	}
	return dptest.CompareNorms(dptest.Params(mod), want)
}

// TestSGDWithSchedule: SGD with momentum, weight decay and a StepLR
// schedule driven through Model.Optimizer equals one process.
func TestSGDWithSchedule(t *testing.T) {
	w := workload{name: "gpt", model: gptWorkload().model, batch: gptWorkload().batch}
	const steps = 4
	sched := optim.StepLR{StepSize: 2, Gamma: 0.5}
	sgd := func(ps []nn.NamedParameter) (optim.Optimizer, error) {
		return optim.NewSGD([]optim.Group{{Params: Vars(ps), LR: 0.05, WeightDecay: 0.01}}, optim.SGDOptions{Momentum: 0.9})
	}
	mod := w.model()
	opt, _ := sgd(mod.NamedParameters())
	sc, _ := optim.NewScheduler(opt, sched)
	for s := range steps {
		fwd, loss := w.batch(mod, s, 0, globalBatch)
		autograd.Backward(loss(fwd()))
		opt.Step()
		opt.ZeroGrad()
		sc.Step()
	}
	want := dptest.Params(mod)
	distributedtest.Run(t, 3, func(t *testing.T, pg distributed.ProcessGroup) {
		ctx := context.Background()
		mod, m := wrapNew(t, ctx, w, pg, Options{Optimizer: sgd})
		sc, err := optim.NewScheduler(m.Optimizer(), sched)
		if err != nil {
			t.Fatal(err)
		}
		r := pg.Rank()
		for s := range steps {
			fwd, loss := w.batch(mod, s, r*4, r*4+4)
			out, err := m.Call(ctx, fwd)
			if err != nil {
				t.Fatal(err)
			}
			if err := m.Backward(ctx, loss(out)); err != nil {
				t.Fatal(err)
			}
			if err := m.Step(ctx); err != nil {
				t.Fatal(err)
			}
			m.ZeroGrad()
			sc.Step()
		}
		if err := dptest.CompareNorms(dptest.Params(mod), want); err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	})
}

// TestReshardCheckpoint: model and optimizer state saved as shards at
// world 3 after 2 steps load at world 2, and 2 more steps there give the
// parameters of 4 steps at world 2 (the same global batches).
func TestReshardCheckpoint(t *testing.T) {
	w := workloads()[1] // LeNet
	run := func(m *Model, mod nn.Module, pg distributed.ProcessGroup, from, to int) error {
		return trainSteps(context.Background(), w, m, mod, pg, from, to, false)
	}
	var saved []ShardedTensor
	var mu sync.Mutex
	distributedtest.Run(t, 3, func(t *testing.T, pg distributed.ProcessGroup) {
		mod, m := wrapNew(t, context.Background(), w, pg, Options{Optimizer: adamW})
		if err := run(m, mod, pg, 0, 2); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		defer mu.Unlock()
		for _, e := range append(m.ShardedStateDict(), m.OptimizerShards()...) {
			if e.Replicated && pg.Rank() != 0 {
				continue
			}
			e.Data = append([]float32(nil), e.Data...)
			saved = append(saved, e)
		}
	})
	distributedtest.Run(t, 2, func(t *testing.T, pg distributed.ProcessGroup) {
		ctx := context.Background()
		mod := w.model()
		want, _, err := trainZero(ctx, w, pg, Options{Stage: Stage2}, 4, false)
		if err != nil {
			t.Fatal(err)
		}
		m, err := Wrap(ctx, mod, pg, Options{Optimizer: adamW})
		if err != nil {
			t.Fatal(err)
		}
		if err := m.LoadShardedStateDict(saved); err != nil {
			t.Fatal(err)
		}
		if err := m.LoadOptimizerShards(saved); err != nil {
			t.Fatal(err)
		}
		if err := run(m, mod, pg, 2, 4); err != nil {
			t.Fatal(err)
		}
		if err := dptest.CompareNorms(dptest.Params(mod), want); err != nil {
			t.Errorf("rank %d: resumed at world 2: %v", pg.Rank(), err)
		}
		// Another model's state is refused, naming a key.
		other := append([]ShardedTensor{{Name: "fc.weight", Shape: []int{1}, Data: []float32{0}}}, saved...)
		if err := m.LoadShardedStateDict(other); err == nil || !strings.Contains(err.Error(), `"fc.weight"`) {
			t.Errorf("another model's state: err = %v", err)
		}
	})
}

// TestUnusedParameters: with FindUnusedParameters, steps that leave a
// layer out give every stage the parameters ddp gives.
func TestUnusedParameters(t *testing.T) {
	mlp := workloads()[0]
	model := func() *dptest.WithSide {
		rng := rand.New(rand.NewPCG(5, 6))
		return &dptest.WithSide{Seq: mlp.model().(*nn.Sequential), Side: nn.NewLinear(rng, 784, 10, true)}
	}
	const steps = 4
	distributedtest.Run(t, 2, func(t *testing.T, pg distributed.ProcessGroup) {
		ctx := context.Background()
		n, r := pg.Size(), pg.Rank()
		lo, hi := r*globalBatch/n, (r+1)*globalBatch/n
		want := dptest.SideReference(t, ctx, model(), func(ref *dptest.WithSide) (dptest.Synced, error) {
			return ddp.WrapModule(ctx, ref, pg, ddp.Options{FindUnusedParameters: true})
		}, adamW, maxNorm, steps, lo, hi)
		for _, stage := range []Stage{Stage1, Stage2} {
			mod := model()
			m, err := Wrap(ctx, mod, pg, Options{Stage: stage, Optimizer: adamW, FindUnusedParameters: true})
			if err != nil {
				t.Fatal(err)
			}
			err = dptest.TrainSide(steps, lo, hi, func(s int, x *autograd.Var) (*autograd.Var, error) {
				return m.Call(ctx, func() *autograd.Var { return mod.Forward(s, x) })
			}, func(loss *autograd.Var) error { return m.Backward(ctx, loss) }, func() error { return dptest.ClipStep(ctx, m, maxNorm) })
			if err != nil {
				t.Fatalf("%v: %v", stage, err)
			}
			if err := dptest.CompareElements(dptest.Params(mod), want); err != nil {
				t.Errorf("rank %d: %v: %v", r, stage, err)
			}
		}
	})
}

// TestZeroGradThenClip: after ZeroGrad, and before any backward pass, the
// gradient is zero to ClipGradNorm (under Stage2 the shards are only
// marked unset by ZeroGrad and cleared when first read).
func TestZeroGradThenClip(t *testing.T) {
	w := workloads()[0]
	for _, stage := range []Stage{Stage1, Stage2} {
		distributedtest.Run(t, 2, func(t *testing.T, pg distributed.ProcessGroup) {
			ctx := context.Background()
			_, m, err := trainZero(ctx, w, pg, Options{Stage: stage}, 1, false) // ends with ZeroGrad
			if err != nil {
				t.Fatal(err)
			}
			norm, err := m.ClipGradNorm(ctx, maxNorm, 2)
			if err != nil || norm != 0 {
				t.Errorf("rank %d: %v: ClipGradNorm after ZeroGrad = %v, %v; want 0", pg.Rank(), stage, norm, err)
			}
		})
	}
}
