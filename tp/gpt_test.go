package tp_test

import (
	"context"
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
	"github.com/cohortml/cohort/tp"
)

// The anchor recipe (shared/anchors, gpt_mini.py): AdamW lr 3e-4, betas
// (0.9, 0.95), eps 1e-8, weight decay 0.1 on every parameter, clip 1.0.
const (
	lr        = 3e-4
	wd        = 0.1
	clipNorm  = 1.0
	modelSeed = 0
)

func newAdamW(t *testing.T, params []*autograd.Var) *optim.Adam {
	t.Helper()
	opt, err := optim.NewAdamW([]optim.Group{{Params: params, LR: lr, WeightDecay: wd}},
		optim.AdamOptions{Beta1: 0.9, Beta2: 0.95, Eps: 1e-8})
	if err != nil {
		t.Fatal(err)
	}
	return opt
}

func newFullGPT(t *testing.T, cfg models.GPTConfig) *models.GPT {
	t.Helper()
	g, err := models.NewGPT(rand.New(rand.NewPCG(modelSeed, 0)), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// run is what a training run leaves for comparison: per-step losses and
// pre-clip gradient norms, the full gradients of the first step and the
// full parameters at the end.
type run struct {
	losses, norms []float64
	grads, final  map[string]*tensor.Tensor
}

// batch is one step's global batch: B sequences of T ids and targets.
type batch struct{ idx, tgt []int64 }

func makeBatches(steps, B, T, vocab int) []batch {
	rng := rand.New(rand.NewPCG(42, 1))
	out := make([]batch, steps)
	for s := range out {
		b := batch{make([]int64, B*T), make([]int64, B*T)}
		for i := range b.idx {
			b.idx[i], b.tgt[i] = int64(rng.IntN(vocab)), int64(rng.IntN(vocab))
		}
		out[s] = b
	}
	return out
}

// rows returns sequences [lo, hi) of b.
func (b batch) rows(lo, hi, T int) batch { return batch{b.idx[lo*T : hi*T], b.tgt[lo*T : hi*T]} }

// trainReference trains the unsharded model on the global batches in one
// process: the losses per step, the gradients of the first step and the
// final parameters.
func trainReference(t *testing.T, cfg models.GPTConfig, batches []batch, B, T int) run {
	t.Helper()
	g := newFullGPT(t, cfg)
	params := nn.Parameters(g)
	opt := newAdamW(t, params)
	var r run
	for s, b := range batches {
		opt.ZeroGrad()
		loss := g.Loss(g.Forward(b.idx, B, T), b.tgt)
		autograd.Backward(loss)
		if s == 0 {
			r.grads = map[string]*tensor.Tensor{}
			for _, p := range g.NamedParameters() {
				r.grads[p.Name] = p.Param.Grad.Clone()
			}
		}
		norm, err := optim.ClipGradNorm(params, clipNorm, 2)
		if err != nil {
			t.Fatal(err)
		}
		opt.Step()
		r.losses = append(r.losses, float64(loss.Value.Item()))
		r.norms = append(r.norms, norm)
	}
	r.final = map[string]*tensor.Tensor{}
	for name, v := range nn.StateDict(g) {
		r.final[name] = v.Clone()
	}
	return r
}

// trainTP trains a tp.GPT over tpg on this rank's sequences of each
// global batch (all of them without data parallelism); with dpg, the
// gradients are averaged over the data-parallel ranks before clipping.
// It returns the losses (averaged over dpg), the gathered gradients of
// the first step and the gathered final parameters.
func trainTP(t *testing.T, ctx context.Context, tpg, dpg distributed.ProcessGroup, cfg models.GPTConfig, batches []batch, B, T int) run {
	t.Helper()
	full := newFullGPT(t, cfg)
	m, err := tp.NewGPT(tpg, full)
	if err != nil {
		t.Fatal(err)
	}
	// Sharding then gathering gives back the full model exactly.
	sd, err := m.FullStateDict(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for name, v := range nn.StateDict(full) {
		if d := maxDiff(sd[name], v); d != 0 {
			t.Errorf("gathered %s differs from the full model by %g before training", name, d)
		}
	}
	params := nn.Parameters(m)
	opt := newAdamW(t, params)
	lo, hi := 0, B
	if dpg != nil {
		lo, hi = dpg.Rank()*B/dpg.Size(), (dpg.Rank()+1)*B/dpg.Size()
	}
	var r run
	for s, gb := range batches {
		b := gb.rows(lo, hi, T)
		opt.ZeroGrad()
		logits, err := m.Forward(ctx, b.idx, hi-lo, T)
		if err != nil {
			t.Fatal(err)
		}
		loss, err := m.Loss(ctx, logits, b.tgt)
		if err != nil {
			t.Fatal(err)
		}
		if err := m.Backward(loss); err != nil {
			t.Fatal(err)
		}
		l := []float32{loss.Value.Item()}
		if dpg != nil {
			for _, p := range params {
				if err := dpg.AllReduce(ctx, distributed.FromTensor(p.Grad), distributed.Avg).Wait(); err != nil {
					t.Fatal(err)
				}
			}
			if err := dpg.AllReduce(ctx, distributed.F32(l), distributed.Avg).Wait(); err != nil {
				t.Fatal(err)
			}
		}
		if s == 0 {
			r.grads = gatherGrads(t, ctx, m)
		}
		norm, err := m.ClipGradNorm(ctx, clipNorm)
		if err != nil {
			t.Fatal(err)
		}
		opt.Step()
		r.losses = append(r.losses, float64(l[0]))
		r.norms = append(r.norms, norm)
	}
	checkReplicas(t, ctx, m)
	if r.final, err = m.FullStateDict(ctx); err != nil {
		t.Fatal(err)
	}
	return r
}

// checkReplicas fails unless every replicated parameter is bitwise the
// same on every tensor-parallel rank (they get the same gradients, so they
// must never drift apart).
func checkReplicas(t *testing.T, ctx context.Context, m *tp.GPT) {
	t.Helper()
	pg := m.Comm().Group()
	for _, s := range m.Shards() {
		if s.Placement.Sharded {
			continue
		}
		v := s.Param.Value.Contiguous()
		all := tensor.New(append([]int{pg.Size()}, v.Shape()...)...)
		if err := pg.AllGather(ctx, distributed.FromTensor(all), distributed.FromTensor(v)).Wait(); err != nil {
			t.Fatal(err)
		}
		for r := range pg.Size() {
			if d := maxDiff(all.Select(0, r), v); d != 0 {
				t.Errorf("rank %d: replicated %s differs from tensor-parallel rank %d's by %g", pg.Rank(), s.Name, r, d)
			}
		}
	}
}

// gatherGrads gathers the full gradients of m, named as its parameters.
func gatherGrads(t *testing.T, ctx context.Context, m *tp.GPT) map[string]*tensor.Tensor {
	t.Helper()
	shards := m.Shards()
	for i := range shards {
		shards[i].Param = autograd.NewVar(shards[i].Param.Grad, false)
	}
	g, err := tp.FullStateDict(ctx, m.Comm(), shards)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// compare reports the largest differences between a tensor-parallel run
// and the reference, failing beyond float32-rounding tolerances.
func compare(t *testing.T, rank int, got, ref run) {
	t.Helper()
	var dl, dn float64
	clipped := 0
	for s := range ref.losses {
		dl = max(dl, math.Abs(got.losses[s]-ref.losses[s]))
		dn = max(dn, math.Abs(got.norms[s]-ref.norms[s])/ref.norms[s])
		if ref.norms[s] > clipNorm {
			clipped++
		}
	}
	// Gradients relative to each tensor's largest entry; parameters after
	// the steps absolutely (AdamW moves each by about lr per step).
	var dg, dp float64
	worstG, worstP := "", ""
	for name, want := range ref.grads {
		scale := 0.0
		for _, v := range want.Data() {
			scale = max(scale, math.Abs(float64(v)))
		}
		if d := maxDiff(got.grads[name], want) / max(scale, 1e-12); d > dg {
			dg, worstG = d, name
		}
	}
	for name, want := range ref.final {
		if d := maxDiff(got.final[name], want); d > dp {
			dp, worstP = d, name
		}
	}
	if rank == 0 {
		t.Logf("max |Δloss| %.3g over %d steps; gradient norm max relative Δ %.3g (clipped at %d of %d steps); first-step gradients max relative Δ %.3g (%s); final parameters max |Δ| %.3g (%s)",
			dl, len(ref.losses), dn, clipped, len(ref.losses), dg, worstG, dp, worstP)
	}
	if clipped == 0 {
		t.Errorf("the gradient norm never exceeded %g: clipping was not exercised", clipNorm)
	}
	if dn > 1e-5 {
		t.Errorf("rank %d: gradient norms differ from one process by up to %g relative", rank, dn)
	}
	if dl > 2e-5 {
		t.Errorf("rank %d: losses differ from one process by up to %g", rank, dl)
	}
	if dg > 1e-4 {
		t.Errorf("rank %d: first-step gradient %s differs from one process by %g of its largest entry", rank, worstG, dg)
	}
	// AdamW divides each gradient element by its running RMS, so round-off
	// in a small element becomes a relative error of its step: allow 1% of
	// the largest movement AdamW can make in 20 steps (20·lr = 6e-3).
	if dp > 6e-5 {
		t.Errorf("rank %d: parameter %s differs from one process by %g after %d steps", rank, worstP, dp, len(ref.losses))
	}
}

// TestGPTEqualsOneProcess: GPT-mini trained with tensor parallelism over
// in-process ranks equals one process within float32 rounding: the same
// losses, gradients and parameters.
func TestGPTEqualsOneProcess(t *testing.T) {
	cfg := models.GPTMini()
	for _, tc := range []struct {
		tp, steps, B, T int
	}{
		{tp: 2, steps: 20, B: 4, T: 64},
		{tp: 4, steps: 10, B: 2, T: 32},
		{tp: 1, steps: 2, B: 2, T: 16},
	} {
		t.Run(fmt.Sprintf("tp=%d/steps=%d/batch=%dx%d", tc.tp, tc.steps, tc.B, tc.T), func(t *testing.T) {
			batches := makeBatches(tc.steps, tc.B, tc.T, cfg.Vocab)
			ref := trainReference(t, cfg, batches, tc.B, tc.T)
			distributedtest.Run(t, tc.tp, func(t *testing.T, pg distributed.ProcessGroup) {
				ctx := distributedtest.Context(t, 2*time.Minute)
				compare(t, pg.Rank(), trainTP(t, ctx, pg, nil, cfg, batches, tc.B, tc.T), ref)
			})
		})
	}
}

// TestDPxTP: a dp=2 × tp=2 mesh on 4 ranks, tp.GPT on the tp groups and
// gradients averaged over the dp groups, equals one process trained on the
// dp-global batch.
func TestDPxTP(t *testing.T) {
	cfg := models.GPTMini()
	const steps, B, T = 10, 4, 32 // B is the global batch: 2 sequences per dp rank
	batches := makeBatches(steps, B, T, cfg.Vocab)
	ref := trainReference(t, cfg, batches, B, T)
	distributedtest.Run(t, 4, func(t *testing.T, pg distributed.ProcessGroup) {
		ctx := distributedtest.Context(t, 2*time.Minute)
		mesh, err := distributed.NewMesh(ctx, pg, distributed.MeshDim{Name: "dp", Size: 2}, distributed.MeshDim{Name: "tp", Size: 2})
		if err != nil {
			t.Fatal(err)
		}
		compare(t, pg.Rank(), trainTP(t, ctx, mesh.Group("tp"), mesh.Group("dp"), cfg, batches, B, T), ref)
	})
}

// TestBadConfig: sizes that do not split across the tensor-parallel ranks
// get an error naming them.
func TestBadConfig(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  models.GPTConfig
		n    int
		want string
	}{
		{"heads", models.GPTMini(), 3, "4 heads do not split across 3 tensor-parallel ranks"},
		{"vocab", models.GPTConfig{Vocab: 250, Ctx: 8, NLayer: 1, D: 16, NHead: 4}, 4, "vocabulary 250 does not split across 4"},
		{"ranks", models.GPTMini(), 0, "0 tensor-parallel ranks"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tp.CheckConfig(tc.cfg, tc.n)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("CheckConfig(%+v, %d) = %v, want an error containing %q", tc.cfg, tc.n, err, tc.want)
			}
		})
	}
	t.Run("NewGPT", func(t *testing.T) {
		full := newFullGPT(t, models.GPTMini())
		distributedtest.Run(t, 3, func(t *testing.T, pg distributed.ProcessGroup) {
			if _, err := tp.NewGPT(pg, full); err == nil || !strings.Contains(err.Error(), "4 heads do not split across 3") {
				t.Errorf("rank %d: NewGPT over 3 ranks: %v", pg.Rank(), err)
			}
		})
	})
	t.Run("layers", func(t *testing.T) {
		distributedtest.Run(t, 4, func(t *testing.T, pg distributed.ProcessGroup) {
			c := tp.NewComm(pg)
			if _, err := tp.NewMLP(c, nn.NewMLP(rand.New(rand.NewPCG(1, 1)), 4, 6)); err == nil || !strings.Contains(err.Error(), "hidden width 6 does not split across 4") {
				t.Errorf("NewMLP: %v", err)
			}
			if _, err := tp.NewColumnParallelLinear(c, nn.NewLinear(rand.New(rand.NewPCG(1, 1)), 4, 6, true), false); err == nil || !strings.Contains(err.Error(), "6 output features") {
				t.Errorf("NewColumnParallelLinear: %v", err)
			}
			if _, err := tp.NewRowParallelLinear(c, nn.NewLinear(rand.New(rand.NewPCG(1, 1)), 6, 4, true), true); err == nil || !strings.Contains(err.Error(), "6 input features") {
				t.Errorf("NewRowParallelLinear: %v", err)
			}
			if _, err := tp.NewVocabEmbedding(c, tensor.New(10, 2)); err == nil || !strings.Contains(err.Error(), "vocabulary 10") {
				t.Errorf("NewVocabEmbedding: %v", err)
			}
		})
	})
}

// TestPeerFailure: when a tensor-parallel peer goes away, the other rank's
// Forward and Backward return an error naming the collective (never a
// hang), and the error sticks.
func TestPeerFailure(t *testing.T) {
	defer distributedtest.CheckLeaks(t)()
	cfg := models.GPTConfig{Vocab: 16, Ctx: 8, NLayer: 1, D: 8, NHead: 2}
	full := newFullGPT(t, cfg)
	ids := make([]int64, 8)
	distributedtest.RunWith(t, 2, distributed.GroupOptions{Timeout: 10 * time.Second}, func(t *testing.T, pg distributed.ProcessGroup) {
		ctx := distributedtest.Context(t, time.Minute)
		m, err := tp.NewGPT(pg, full)
		if err != nil {
			t.Fatal(err)
		}
		// One good step first.
		logits, err := m.Forward(ctx, ids, 1, 8)
		if err != nil {
			t.Fatal(err)
		}
		loss, err := m.Loss(ctx, logits, ids)
		if err != nil {
			t.Fatal(err)
		}
		if err := m.Backward(loss); err != nil {
			t.Fatal(err)
		}
		if err := pg.Barrier(ctx).Wait(); err != nil {
			t.Fatal(err)
		}
		if pg.Rank() == 1 {
			pg.Close() // rank 1 dies
			return
		}
		_, err = m.Forward(ctx, ids, 1, 8)
		if err == nil || !strings.Contains(err.Error(), "tp: ") || !strings.Contains(err.Error(), "rank 0 of 2") {
			t.Fatalf("Forward after the peer left: %v", err)
		}
		if err2 := m.Comm().Err(); err2 != err {
			t.Errorf("Comm.Err() = %v, want the first error %v", err2, err)
		}
		t.Logf("rank 0: %v", err)
	})
}
