package fsdp

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/cohortml/cohort/autograd"
	"github.com/cohortml/cohort/ddp"
	"github.com/cohortml/cohort/distributed"
	"github.com/cohortml/cohort/distributed/distributedtest"
	"github.com/cohortml/cohort/internal/dp/dptest"
	"github.com/cohortml/cohort/models"
	"github.com/cohortml/cohort/nn"
	"github.com/cohortml/cohort/optim"
	"github.com/cohortml/cohort/tensor"
	"github.com/cohortml/cohort/zero"
)

const (
	globalBatch = dptest.GlobalBatch
	lr, wd      = 1e-3, 0.1
	maxNorm     = 0.5
)

// step is one step's batch for rows [lo, hi): the plain forward pass, the
// same pass through fsdp units, and the loss of the output.
type step struct {
	plain func() *autograd.Var
	units func(*Units) *autograd.Var
	loss  func(*autograd.Var) *autograd.Var
}

type workload struct {
	name  string
	model func() nn.Module
	units func(nn.Module) []nn.Module
	batch func(mod nn.Module, s, lo, hi int) step
}

func imageWorkload(name string, build func(*rand.Rand) *nn.Sequential, shape []int) workload {
	return workload{name: name,
		model: func() nn.Module { return build(rand.New(rand.NewPCG(1, 2))) },
		units: func(mod nn.Module) []nn.Module { u, _ := SequentialUnits(mod.(*nn.Sequential)); return u },
		batch: func(mod nn.Module, s, lo, hi int) step {
			xs, ys := dptest.Images(s, 7, lo, hi, shape)
			seq := mod.(*nn.Sequential)
			x := autograd.NewVar(xs, false)
			_, fwd := SequentialUnits(seq)
			return step{plain: func() *autograd.Var { return seq.Forward(x) }, units: fwd(x),
				loss: func(out *autograd.Var) *autograd.Var {
					return autograd.CrossEntropy(out, ys, autograd.CrossEntropyOptions{})
				}}
		}}
}

// gptUnits runs GPT's forward pass with each block as a unit (the
// embeddings and the final LayerNorm form the root).
func gptUnits(g *models.GPT, idx []int64, B, T int) func(*Units) *autograd.Var {
	fwd := dptest.GPTForward(g, idx, B, T)
	return func(u *Units) *autograd.Var { return fwd(u.Run) }
}

func gptWorkload() workload {
	const T = 8
	return workload{name: "gpt-mini",
		model: func() nn.Module { return dptest.NewGPT(rand.New(rand.NewPCG(3, 4)), models.GPTMini()) },
		units: dptest.GPTUnits,
		batch: func(mod nn.Module, s, lo, hi int) step {
			idx, tgt := dptest.Tokens(s, lo, hi, T, 256)
			g := mod.(*models.GPT)
			return step{plain: func() *autograd.Var { return g.Forward(idx, hi-lo, T) }, units: gptUnits(g, idx, hi-lo, T),
				loss: func(out *autograd.Var) *autograd.Var { return g.Loss(out, tgt) }}
		}}
}

func workloads() []workload {
	return []workload{
		imageWorkload("mlp", models.MLP, []int{784}),
		imageWorkload("cnn", models.LeNet, []int{1, 28, 28}),
		gptWorkload(),
	}
}

func adamW(ps []nn.NamedParameter) (optim.Optimizer, error) {
	return optim.NewAdamW([]optim.Group{{Params: zero.Vars(ps), LR: lr, WeightDecay: wd}}, optim.AdamDefaults())
}

func reference(t *testing.T, w workload, steps int) [][]float32 {
	mod := w.model()
	opt, err := adamW(mod.NamedParameters())
	if err != nil {
		t.Fatal(err)
	}
	for s := range steps {
		b := w.batch(mod, s, 0, globalBatch)
		autograd.Backward(b.loss(b.plain()))
		if _, err := optim.ClipGradNorm(nn.Parameters(mod), maxNorm, 2); err != nil {
			t.Fatal(err)
		}
		opt.Step()
		opt.ZeroGrad()
	}
	return dptest.Params(mod)
}

// trainFSDP trains with fsdp on one rank and returns the full parameters
// (in module order) and the model.
func trainFSDP(ctx context.Context, w workload, pg distributed.ProcessGroup, steps int, o Options) ([][]float32, *Model, error) {
	mod := w.model()
	o.Optimizer = adamW
	m, err := Wrap(ctx, mod, w.units(mod), pg, o)
	if err != nil {
		return nil, nil, err
	}
	n, r := pg.Size(), pg.Rank()
	for s := range steps {
		b := w.batch(mod, s, r*globalBatch/n, (r+1)*globalBatch/n)
		out, err := m.Call(ctx, b.units)
		if err != nil {
			return nil, nil, err
		}
		if err := m.Backward(ctx, b.loss(out)); err != nil {
			return nil, nil, err
		}
		if err := dptest.ClipStep(ctx, m, maxNorm); err != nil {
			return nil, nil, err
		}
	}
	out, err := fullParams(ctx, m, mod)
	if err != nil {
		return nil, nil, err
	}
	return out, m, nil
}

// fullParams gathers m's full state and returns mod's parameters from it,
// in mod's order.
func fullParams(ctx context.Context, m *Model, mod nn.Module) ([][]float32, error) {
	sd, err := m.FullStateDict(ctx)
	if err != nil {
		return nil, err
	}
	var out [][]float32
	for _, p := range mod.NamedParameters() {
		out = append(out, sd[p.Name].Data())
	}
	return out, nil
}

// checkParams fails t unless m's full parameters (in mod's order) pass
// compare against want; what says whose they are.
func checkParams(t *testing.T, ctx context.Context, m *Model, mod nn.Module, want [][]float32, compare func(got, want [][]float32) error, what string) {
	t.Helper()
	got, err := fullParams(ctx, m, mod)
	if err != nil {
		t.Fatal(err)
	}
	if err := compare(got, want); err != nil {
		t.Errorf("%s: %v", what, err)
	}
}

// TestMemory: between steps a rank holds 1/N of the parameters (within
// 1 %), and 1/N of the optimizer state; during forward and backward it held at most the
// root and two units gathered.
func TestMemory(t *testing.T) {
	w := gptWorkload()
	var total, root, unit int64
	mod := w.model()
	for _, p := range mod.NamedParameters() {
		total += 4 * int64(p.Param.Value.Len())
	}
	for _, p := range w.units(mod)[0].NamedParameters() {
		unit += 4 * int64(p.Param.Value.Len())
	}
	root = total - int64(len(w.units(mod)))*unit
	for _, world := range []int{2, 4} {
		t.Run(fmt.Sprintf("world=%d", world), func(t *testing.T) {
			distributedtest.Run(t, world, func(t *testing.T, pg distributed.ProcessGroup) {
				_, m, err := trainFSDP(context.Background(), w, pg, 1, Options{})
				if err != nil {
					t.Fatal(err)
				}
				mem := m.Memory()
				want := float64(total) / float64(world)
				if got := float64(mem.ParamBytes); math.Abs(got-want) > 0.01*want {
					t.Errorf("rank %d: %d parameter bytes between steps, want %.0f ± 1%%", pg.Rank(), mem.ParamBytes, want)
				}
				if got := float64(mem.OptimizerBytes); math.Abs(got-2*want) > 0.01*2*want {
					t.Errorf("rank %d: %d optimizer bytes, want %.0f ± 1%%", pg.Rank(), mem.OptimizerBytes, 2*want)
				}
				// Padding adds at most 16·N elements per bucket.
				limit := root + 2*unit + int64(3*16*world*4)
				if peak := m.PeakGatheredBytes(); peak > limit || peak <= root {
					t.Errorf("rank %d: peak gathered %d bytes, want in (root %d, root + 2 units = %d]", pg.Rank(), peak, root, limit)
				}
			})
		})
	}
}

// TestStateDicts: the full state dict equals the module's parameters, and
// sharded state saved at world 3 loads at world 2.
func TestStateDicts(t *testing.T) {
	w := workloads()[1] // LeNet
	var saved []zero.ShardedTensor
	var full map[string]*tensor.Tensor
	distributedtest.Run(t, 3, func(t *testing.T, pg distributed.ProcessGroup) {
		_, m, err := trainFSDP(context.Background(), w, pg, 2, Options{})
		if err != nil {
			t.Fatal(err)
		}
		sd, err := m.FullStateDict(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		shard := append(m.ShardedStateDict(), m.OptimizerShards()...)
		if pg.Rank() == 0 {
			full = sd
		}
		for r := range 3 { // serialise the appends
			if err := pg.Barrier(context.Background()).Wait(); err != nil {
				t.Fatal(err)
			}
			if r == pg.Rank() {
				for _, e := range shard {
					e.Data = append([]float32(nil), e.Data...)
					saved = append(saved, e)
				}
			}
		}
	})
	distributedtest.Run(t, 2, func(t *testing.T, pg distributed.ProcessGroup) {
		ctx := context.Background()
		mod := w.model()
		m, err := Wrap(ctx, mod, w.units(mod), pg, Options{Optimizer: adamW})
		if err != nil {
			t.Fatal(err)
		}
		if err := m.LoadShardedStateDict(saved); err != nil {
			t.Fatal(err)
		}
		if err := m.LoadOptimizerShards(saved); err != nil {
			t.Fatal(err)
		}
		sd, err := m.FullStateDict(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for k, want := range full {
			if err := dptest.CompareElements([][]float32{sd[k].Data()}, [][]float32{want.Data()}); err != nil {
				t.Errorf("rank %d: key %q after loading at world 2: %v", pg.Rank(), k, err)
			}
		}
		bad := append([]zero.ShardedTensor{{Name: "fc.weight", Shape: []int{2}, Data: []float32{1, 2}}}, saved...)
		if err := m.LoadShardedStateDict(bad); err == nil || !strings.Contains(err.Error(), `unexpected keys "fc.weight"`) {
			t.Errorf("another model's state: err = %v", err)
		}
		// saved[0] is the start of rank 0's first bucket at world 3, which
		// rank 0 owns at any world size.
		if err := m.LoadShardedStateDict(saved[1:]); pg.Rank() == 0 && (err == nil || !strings.Contains(err.Error(), `key "`+saved[0].Name+`"`)) {
			t.Errorf("a shard missing: err = %v", err)
		}
	})
}

// TestWrapErrors: bad input fails at once, naming the culprit.
func TestWrapErrors(t *testing.T) {
	small := func(hidden int) *nn.Sequential { return dptest.SmallNet(1, hidden) }
	dptest.RunErrors(t, []dptest.ErrorCase{
		{Name: "optimizer on full parameters", World: 2, Wrap: func(ctx context.Context, pg distributed.ProcessGroup) error {
			net := small(5)
			u, _ := SequentialUnits(net)
			_, err := Wrap(ctx, net, u, pg, Options{Optimizer: func([]nn.NamedParameter) (optim.Optimizer, error) {
				return optim.NewAdamW([]optim.Group{{Params: nn.Parameters(net), LR: 1e-3}}, optim.AdamDefaults())
			}})
			return err
		}, Want: `built on the full parameters (it zeroes the gradient of "0.weight")`},
		{Name: "models differ", World: 2, Wrap: func(ctx context.Context, pg distributed.ProcessGroup) error {
			net := small(5 + pg.Rank())
			u, _ := SequentialUnits(net)
			_, err := Wrap(ctx, net, u, pg, Options{Optimizer: adamW})
			return err
		}, Want: `rank 1 has parameter "0.weight" float32[6 4]`},
		{Name: "parameter in two units", World: 1, Wrap: func(ctx context.Context, pg distributed.ProcessGroup) error {
			net := small(5)
			_, err := Wrap(ctx, net, []nn.Module{net.Layers[0], net.Layers[0]}, pg, Options{Optimizer: adamW})
			return err
		}, Want: `parameter "0.weight" is in units 0 and 1`},
		{Name: "unit of another model", World: 1, Wrap: func(ctx context.Context, pg distributed.ProcessGroup) error {
			_, err := Wrap(ctx, small(5), []nn.Module{small(5).Layers[0]}, pg, Options{Optimizer: adamW})
			return err
		}, Want: "not a parameter of the model"},
	})
}

// TestPlainBackwardAndNoSync: autograd.Backward instead of Model.Backward,
// NoSync accumulation over two micro-batches, and prefetching across
// steps give the parameters of Model.Backward over whole batches.
func TestPlainBackwardAndNoSync(t *testing.T) {
	w := gptWorkload()
	const steps = 3
	distributedtest.Run(t, 2, func(t *testing.T, pg distributed.ProcessGroup) {
		ctx := context.Background()
		want, _, err := trainFSDP(ctx, w, pg, steps, Options{})
		if err != nil {
			t.Fatal(err)
		}
		for _, mode := range []string{"plain", "nosync", "synced", "prefetch", "eval", "eval+nosync"} {
			mod := w.model()
			m, err := Wrap(ctx, mod, w.units(mod), pg, Options{Optimizer: adamW, PrefetchAcrossSteps: mode == "prefetch"})
			if err != nil {
				t.Fatal(err)
			}
			lo := pg.Rank() * globalBatch / 2
			for s := range steps {
				pass := func(a, b int, scale float32, plain bool) error {
					st := w.batch(mod, s, a, b)
					out, err := m.Call(ctx, st.units)
					if err != nil {
						return err
					}
					loss := autograd.Scale(st.loss(out), scale)
					if plain {
						autograd.Backward(loss)
						return nil
					}
					return m.Backward(ctx, loss)
				}
				switch mode {
				case "plain":
					err = pass(lo, lo+6, 1, true)
				case "prefetch":
					err = pass(lo, lo+6, 1, false)
				case "eval", "eval+nosync": // forward passes without backward (validation) change nothing
					for e := range 2 {
						st := w.batch(mod, 100+e, lo, lo+6)
						out, err := m.Call(ctx, st.units)
						if err != nil {
							t.Fatalf("eval: %v", err)
						}
						st.loss(out)
					}
					if mode == "eval" {
						err = pass(lo, lo+6, 1, false)
					} else if err = m.NoSync(func() error { return pass(lo, lo+3, 0.5, false) }); err == nil {
						err = pass(lo+3, lo+6, 0.5, false)
					}
				case "synced": // two synchronised passes accumulate, as in PyTorch
					if err = pass(lo, lo+3, 0.5, false); err == nil {
						err = pass(lo+3, lo+6, 0.5, false)
					}
				default:
					if err = m.NoSync(func() error { return pass(lo, lo+3, 0.5, false) }); err == nil {
						err = pass(lo+3, lo+6, 0.5, false)
					}
				}
				if err != nil {
					t.Fatalf("%s: %v", mode, err)
				}
				if err := dptest.ClipStep(ctx, m, maxNorm); err != nil {
					t.Fatal(err)
				}
			}
			checkParams(t, ctx, m, mod, want, dptest.CompareNorms, fmt.Sprintf("rank %d: %s", pg.Rank(), mode))
		}
	})
}

// TestOutsideUnit: a unit's parameter used outside Units.Run (a layer of
// a unit called directly, or a unit's weight used again after the unit)
// fails the step's Backward with an error naming the parameter and unit,
// on every rank, without a hang; the next step through Units.Run works.
func TestOutsideUnit(t *testing.T) {
	tests := []struct {
		name    string
		forward func(net *nn.Sequential, x *autograd.Var) func(*Units) *autograd.Var
		want    string
	}{
		{"layer called directly", func(net *nn.Sequential, x *autograd.Var) func(*Units) *autograd.Var {
			return func(u *Units) *autograd.Var {
				h := u.Run(0, x, net.Layers[0].Forward)
				return net.Layers[2].Forward(autograd.ReLU(h))
			}
		}, `parameter "2.weight" of unit 1 was used outside the unit's forward (Units.Run): it received its gradient although the backward pass never reached the unit`},
		{"weight reused after its unit", func(net *nn.Sequential, x *autograd.Var) func(*Units) *autograd.Var {
			return func(u *Units) *autograd.Var {
				h := u.Run(0, x, net.Layers[0].Forward)
				h = u.Run(1, autograd.ReLU(h), net.Layers[2].Forward)
				w := net.Layers[2].NamedParameters()[0].Param // 3×5, tied into a head
				return autograd.MatMul(h, w)
			}
		}, `parameter "2.weight" of unit 1 was used outside the unit's forward (Units.Run): its gradient arrived before the unit's backward pass began`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			distributedtest.Run(t, 2, func(t *testing.T, pg distributed.ProcessGroup) {
				ctx := context.Background()
				rng := rand.New(rand.NewPCG(1, 1))
				net := nn.NewSequential(nn.NewLinear(rng, 4, 5, true), nn.ReLU{}, nn.NewLinear(rng, 5, 3, true))
				m, err := Wrap(ctx, net, []nn.Module{net.Layers[0], net.Layers[2]}, pg, Options{Optimizer: adamW})
				if err != nil {
					t.Fatal(err)
				}
				defer m.Close()
				x := autograd.NewVar(tensor.Full(1, 2, 4), false)
				out, err := m.Call(ctx, tc.forward(net, x))
				if err != nil {
					t.Fatal(err)
				}
				err = m.Backward(ctx, autograd.Sum(out))
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("rank %d: Backward: %v, want an error containing %q", pg.Rank(), err, tc.want)
				}
				m.ZeroGrad()
				_, fwd := SequentialUnits(net)
				out, err = m.Call(ctx, fwd(x))
				if err != nil {
					t.Fatal(err)
				}
				if err := m.Backward(ctx, autograd.Sum(out)); err != nil {
					t.Fatalf("rank %d: the next step: %v", pg.Rank(), err)
				}
			})
		})
	}
}

// TestSequentialRuns: each unit runs with the parameterless layers after
// it as one nn.Sequential (so that Linear+ReLU and Conv2d+ReLU+MaxPool2d
// are fused as nn.Sequential fuses them); layers before the first unit run
// on their own.
func TestSequentialRuns(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	seq := nn.NewSequential(nn.Flatten{}, nn.NewLinear(rng, 4, 3, true), nn.ReLU{}, nn.NewLinear(rng, 3, 2, true))
	var got []string
	for _, r := range sequentialRuns(seq) {
		var names []string
		for _, l := range r.seq.Layers {
			names = append(names, fmt.Sprintf("%T", l))
		}
		got = append(got, fmt.Sprintf("%d:%s", r.unit, strings.Join(names, ",")))
	}
	want := []string{"-1:nn.Flatten", "0:*nn.Linear,nn.ReLU", "1:*nn.Linear"}
	if !slices.Equal(got, want) {
		t.Errorf("runs %q, want %q", got, want)
	}
	if units, _ := SequentialUnits(seq); len(units) != 2 || units[0] != seq.Layers[1] || units[1] != seq.Layers[3] {
		t.Errorf("units %v, want the two Linear layers", units)
	}
}

// TestUnusedParameters: with FindUnusedParameters, steps that leave the
// side layer out give the parameters ddp gives (its gradient buffer,
// not zeroed between steps, must reduce zeros then).
func TestUnusedParameters(t *testing.T) {
	model := func() *dptest.WithSide {
		return &dptest.WithSide{Seq: models.MLP(rand.New(rand.NewPCG(1, 2))), Side: nn.NewLinear(rand.New(rand.NewPCG(5, 6)), 784, 10, true)}
	}
	const steps = 4
	distributedtest.Run(t, 2, func(t *testing.T, pg distributed.ProcessGroup) {
		ctx := context.Background()
		n, r := pg.Size(), pg.Rank()
		lo, hi := r*globalBatch/n, (r+1)*globalBatch/n
		want := dptest.SideReference(t, ctx, model(), func(ref *dptest.WithSide) (dptest.Synced, error) {
			return ddp.WrapModule(ctx, ref, pg, ddp.Options{FindUnusedParameters: true})
		}, adamW, maxNorm, steps, lo, hi)
		mod := model()
		units, fwd := SequentialUnits(mod.Seq)
		m, err := Wrap(ctx, mod, units, pg, Options{Optimizer: adamW, FindUnusedParameters: true})
		if err != nil {
			t.Fatal(err)
		}
		err = dptest.TrainSide(steps, lo, hi, func(s int, x *autograd.Var) (*autograd.Var, error) {
			run := fwd(x)
			return m.Call(ctx, func(u *Units) *autograd.Var { return mod.AddSide(s, x, run(u)) })
		}, func(loss *autograd.Var) error { return m.Backward(ctx, loss) }, func() error { return dptest.ClipStep(ctx, m, maxNorm) })
		if err != nil {
			t.Fatal(err)
		}
		checkParams(t, ctx, m, mod, want, dptest.CompareElements, fmt.Sprintf("rank %d", r))
	})
}

// TestZeroGradThenClip: after ZeroGrad, and before any backward pass, the
// gradient is zero to ClipGradNorm (ZeroGrad only marks the shards unset;
// the first read clears them).
func TestZeroGradThenClip(t *testing.T) {
	distributedtest.Run(t, 2, func(t *testing.T, pg distributed.ProcessGroup) {
		ctx := context.Background()
		_, m, err := trainFSDP(ctx, workloads()[0], pg, 1, Options{}) // ends with ZeroGrad
		if err != nil {
			t.Fatal(err)
		}
		norm, err := m.ClipGradNorm(ctx, maxNorm, 2)
		if err != nil || norm != 0 {
			t.Errorf("rank %d: ClipGradNorm after ZeroGrad = %v, %v; want 0", pg.Rank(), norm, err)
		}
	})
}
