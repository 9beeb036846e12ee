package layout_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/cohortml/cohort/autograd"
	"github.com/cohortml/cohort/distributed"
	"github.com/cohortml/cohort/distributed/distributedtest"
	"github.com/cohortml/cohort/layout"
	"github.com/cohortml/cohort/models"
	"github.com/cohortml/cohort/nn"
	"github.com/cohortml/cohort/optim"
	"github.com/cohortml/cohort/pipeline"
	"github.com/cohortml/cohort/tensor"
	"github.com/cohortml/cohort/tp"
)

var _ pipeline.Stage = (*tp.GPTStage)(nil)

// The anchor recipe (shared/anchors, gpt_mini.py): AdamW lr 3e-4, betas
// (0.9, 0.95), eps 1e-8, weight decay 0.1 on every parameter, clip 1.0.
const (
	lr        = 3e-4
	wd        = 0.1
	clipNorm  = 1.0
	modelSeed = 0
)

func newAdamW(t testing.TB, params []*autograd.Var) *optim.Adam {
	t.Helper()
	opt, err := optim.NewAdamW([]optim.Group{{Params: params, LR: lr, WeightDecay: wd}},
		optim.AdamOptions{Beta1: 0.9, Beta2: 0.95, Eps: 1e-8})
	if err != nil {
		t.Fatal(err)
	}
	return opt
}

func newRNG() *rand.Rand { return rand.New(rand.NewPCG(modelSeed, 0)) }

func newFullGPT(t testing.TB) *models.GPT {
	t.Helper()
	g, err := models.NewGPT(newRNG(), models.GPTMini())
	if err != nil {
		t.Fatal(err)
	}
	return g
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

// run is what a training run leaves for comparison: per-step losses and
// pre-clip gradient norms, the full gradients of the first step, the
// full parameters at the end, and the loss Eval gives on the last batch.
type run struct {
	losses, norms []float64
	grads, final  map[string]*tensor.Tensor
	eval          float64
}

// trainReference trains the unsharded model on the global batches in one
// process.
func trainReference(t testing.TB, batches []batch, B, T int) run {
	t.Helper()
	g := newFullGPT(t)
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
	last := batches[len(batches)-1]
	r.eval = float64(g.Loss(g.Forward(last.idx, B, T), last.tgt).Value.Item())
	return r
}

// trainLayout trains GPT-mini under cfg on this rank: each replica takes
// its rows of every global batch.
func trainLayout(ctx context.Context, pg distributed.ProcessGroup, cfg layout.Config, batches []batch) (run, error) {
	var r run
	full, err := models.NewGPT(newRNG(), models.GPTMini())
	if err != nil {
		return r, err
	}
	tr, err := layout.Build(ctx, pg, cfg, full)
	if err != nil {
		return r, err
	}
	defer tr.Close()
	opt, err := optim.NewAdamW([]optim.Group{{Params: tr.Parameters(), LR: lr, WeightDecay: wd}},
		optim.AdamOptions{Beta1: 0.9, Beta2: 0.95, Eps: 1e-8})
	if err != nil {
		return r, err
	}
	B, T := cfg.Batch, cfg.SeqLen
	lo := tr.DataRank() * B
	for s, gb := range batches {
		b := gb.rows(lo, lo+B, T)
		loss, err := tr.Step(ctx, b.idx, b.tgt)
		if err != nil {
			return r, fmt.Errorf("step %d: %w", s, err)
		}
		if s == 0 {
			if r.grads, err = tr.FullGrads(ctx); err != nil {
				return r, err
			}
		}
		norm, err := tr.ClipGradNorm(ctx, clipNorm)
		if err != nil {
			return r, err
		}
		opt.Step()
		r.losses = append(r.losses, loss)
		r.norms = append(r.norms, norm)
	}
	if r.final, err = tr.FullStateDict(ctx); err != nil {
		return r, err
	}
	last := batches[len(batches)-1].rows(lo, lo+B, T)
	if r.eval, err = tr.Eval(ctx, last.idx, last.tgt); err != nil {
		return r, err
	}
	return r, nil
}

func maxDiff(a, b *tensor.Tensor) float64 {
	if a == nil || b == nil || !a.SameShape(b) {
		return math.Inf(1)
	}
	d := 0.0
	ad, bd := a.Contiguous().Data(), b.Contiguous().Data()
	for i := range ad {
		d = max(d, math.Abs(float64(ad[i])-float64(bd[i])))
	}
	return d
}

// compare fails unless a layout's run equals one process's to float32
// rounding (the tolerances of tp's equality tests).
func compare(t *testing.T, rank int, got, ref run) {
	t.Helper()
	if len(got.losses) != len(ref.losses) {
		t.Fatalf("rank %d: %d steps, want %d", rank, len(got.losses), len(ref.losses))
	}
	var dl, dn float64
	clipped := 0
	for s := range ref.losses {
		dl = max(dl, math.Abs(got.losses[s]-ref.losses[s]))
		dn = max(dn, math.Abs(got.norms[s]-ref.norms[s])/ref.norms[s])
		if ref.norms[s] > clipNorm {
			clipped++
		}
	}
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
	de := math.Abs(got.eval - ref.eval)
	if rank == 0 {
		t.Logf("max |Δloss| %.3g over %d steps; gradient norm max relative Δ %.3g (clipped at %d of %d steps); first-step gradients max relative Δ %.3g (%s); final parameters max |Δ| %.3g (%s); eval |Δ| %.3g",
			dl, len(ref.losses), dn, clipped, len(ref.losses), dg, worstG, dp, worstP, de)
	}
	if len(got.final) != len(ref.final) || len(got.grads) != len(ref.grads) {
		t.Errorf("rank %d: gathered %d parameters and %d gradients, the model has %d", rank, len(got.final), len(got.grads), len(ref.final))
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
	if de > 2e-5 {
		t.Errorf("rank %d: Eval loss %v, one process %v", rank, got.eval, ref.eval)
	}
}

// caseName names a layout as a subtest, e.g. dp=2/pp=2/tp=1/1f1b/m=2/steps=20.
func caseName(c layout.Config, steps int) string {
	s := fmt.Sprintf("dp=%d/pp=%d/tp=%d/%s/m=%d", max(c.DP, 1), max(c.PP, 1), max(c.TP, 1), c.Schedule, max(c.Microbatches, 1))
	if c.Schedule == "" {
		s = fmt.Sprintf("dp=%d/pp=%d/tp=%d", max(c.DP, 1), max(c.PP, 1), max(c.TP, 1))
	}
	if c.Recompute {
		s += "/recompute"
	}
	return fmt.Sprintf("%s/batch=%dx%d/steps=%d", s, c.Batch, c.SeqLen, steps)
}

// TestEqualsOneProcess: GPT-mini trained under each composition of data,
// pipeline and tensor parallelism, ranks as goroutines over the in-process
// transport, equals one process within float32 rounding: the same losses,
// gradient norms, first-step gradients, final parameters and eval loss.
func TestEqualsOneProcess(t *testing.T) {
	const T = 16
	for _, tc := range []struct {
		cfg   layout.Config
		steps int
	}{
		{layout.Config{DP: 2, PP: 2, Microbatches: 2, Schedule: "1f1b", Batch: 2, SeqLen: T}, 20},
		{layout.Config{PP: 2, TP: 2, Microbatches: 2, Schedule: "1f1b", Batch: 4, SeqLen: T}, 20},
		{layout.Config{DP: 2, PP: 2, Microbatches: 2, Schedule: "zb", Batch: 2, SeqLen: T}, 4},
		{layout.Config{PP: 2, TP: 2, Microbatches: 4, Schedule: "zb", Batch: 4, SeqLen: T}, 4},
		{layout.Config{PP: 2, TP: 2, Microbatches: 2, Schedule: "interleaved", Batch: 4, SeqLen: T}, 3},
		{layout.Config{PP: 2, TP: 2, Microbatches: 2, Schedule: "gpipe", Recompute: true, Batch: 4, SeqLen: T}, 3},
		{layout.Config{DP: 2, PP: 2, TP: 2, Microbatches: 2, Schedule: "1f1b", Batch: 2, SeqLen: T}, 4},
		{layout.Config{DP: 2, PP: 2, Microbatches: 2, Schedule: "interleaved", Batch: 2, SeqLen: T}, 3},
		{layout.Config{Batch: 4, SeqLen: T}, 2},
	} {
		cfg := tc.cfg
		world := max(cfg.DP, 1) * max(cfg.PP, 1) * max(cfg.TP, 1)
		t.Run(caseName(cfg, tc.steps), func(t *testing.T) {
			global := max(cfg.DP, 1) * cfg.Batch
			batches := makeBatches(tc.steps, global, T, models.GPTMini().Vocab)
			ref := trainReference(t, batches, global, T)
			distributedtest.Run(t, world, func(t *testing.T, pg distributed.ProcessGroup) {
				ctx := distributedtest.Context(t, 2*time.Minute)
				got, err := trainLayout(ctx, pg, cfg, batches)
				if err != nil {
					t.Fatalf("rank %d: %v", pg.Rank(), err)
				}
				compare(t, pg.Rank(), got, ref)
			})
		})
	}
}

// With dp > 1 each stage's gradient all-reduce starts as soon as the
// stage's last backward pass is done, inside the pipeline step: one per
// stage a rank holds, every step.
func TestDPOverlapsPipeline(t *testing.T) {
	for _, sched := range []string{"1f1b", "zb", "interleaved"} {
		t.Run(sched, func(t *testing.T) {
			cfg := layout.Config{DP: 2, PP: 2, Microbatches: 2, Schedule: sched, Batch: 2, SeqLen: 16}
			batches := makeBatches(2, 4, 16, models.GPTMini().Vocab)
			distributedtest.Run(t, 4, func(t *testing.T, pg distributed.ProcessGroup) {
				ctx := distributedtest.Context(t, time.Minute)
				full, err := models.NewGPT(newRNG(), models.GPTMini())
				if err != nil {
					t.Fatal(err)
				}
				tr, err := layout.Build(ctx, pg, cfg, full)
				if err != nil {
					t.Fatal(err)
				}
				defer tr.Close()
				lo := tr.DataRank() * cfg.Batch
				for s, gb := range batches {
					b := gb.rows(lo, lo+cfg.Batch, 16)
					if _, err := tr.Step(ctx, b.idx, b.tgt); err != nil {
						t.Fatal(err)
					}
					if got, want := tr.EarlyDP(), (s+1)*len(tr.Stages()); got != want {
						t.Errorf("rank %d after step %d: %d all-reduces launched inside the pipeline step, want %d (one per stage)", pg.Rank(), s, got, want)
					}
				}
			})
		})
	}
}
