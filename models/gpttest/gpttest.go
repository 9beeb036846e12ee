// Package gpttest is the GPT-mini reference every model-parallel layout is
// held to (tp, layout): the anchor recipe (shared/anchors, gpt_mini.py:
// AdamW lr 3e-4, betas (0.9, 0.95), eps 1e-8, weight decay 0.1 on every
// parameter, clip 1.0), deterministic token batches, one process training
// on the global batch, and Compare, which fails unless a parallel run
// equals that process to float32 rounding. It is imported by tests only.
package gpttest

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/cohortml/cohort/autograd"
	"github.com/cohortml/cohort/models"
	"github.com/cohortml/cohort/nn"
	"github.com/cohortml/cohort/optim"
	"github.com/cohortml/cohort/tensor"
)

// The anchor recipe.
const (
	LR        = 3e-4
	WD        = 0.1
	ClipNorm  = 1.0
	ModelSeed = 0
)

// AdamW is the anchor recipe's optimizer over params.
func AdamW(params []*autograd.Var) (*optim.Adam, error) {
	return optim.NewAdamW([]optim.Group{{Params: params, LR: LR, WeightDecay: WD}},
		optim.AdamOptions{Beta1: 0.9, Beta2: 0.95, Eps: 1e-8})
}

// NewAdamW is AdamW, failing t on an error.
func NewAdamW(t testing.TB, params []*autograd.Var) *optim.Adam {
	t.Helper()
	opt, err := AdamW(params)
	if err != nil {
		t.Fatal(err)
	}
	return opt
}

// NewRNG is the random source every model of a test is built from.
func NewRNG() *rand.Rand { return rand.New(rand.NewPCG(ModelSeed, 0)) }

// NewGPT builds the full model of cfg from NewRNG, failing t on an error.
func NewGPT(t testing.TB, cfg models.GPTConfig) *models.GPT {
	t.Helper()
	g, err := models.NewGPT(NewRNG(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// Batch is one step's global batch: B sequences of T ids and targets.
type Batch struct{ Idx, Tgt []int64 }

// MakeBatches returns steps deterministic global batches of B sequences
// of T tokens below vocab.
func MakeBatches(steps, B, T, vocab int) []Batch {
	rng := rand.New(rand.NewPCG(42, 1))
	out := make([]Batch, steps)
	for s := range out {
		b := Batch{make([]int64, B*T), make([]int64, B*T)}
		for i := range b.Idx {
			b.Idx[i], b.Tgt[i] = int64(rng.IntN(vocab)), int64(rng.IntN(vocab))
		}
		out[s] = b
	}
	return out
}

// Rows returns sequences [lo, hi) of b.
func (b Batch) Rows(lo, hi, T int) Batch { return Batch{b.Idx[lo*T : hi*T], b.Tgt[lo*T : hi*T]} }

// Run is what a training run leaves for comparison: per-step losses and
// pre-clip gradient norms, the full gradients of the first step, the full
// parameters at the end, and the loss of the last batch after training
// (where the run evaluates it).
type Run struct {
	Losses, Norms []float64
	Grads, Final  map[string]*tensor.Tensor
	Eval          float64
}

// TrainReference trains the unsharded model of cfg on the global batches
// (B sequences of T tokens each) in one process.
func TrainReference(t testing.TB, cfg models.GPTConfig, batches []Batch, B, T int) Run {
	t.Helper()
	g := NewGPT(t, cfg)
	params := nn.Parameters(g)
	opt := NewAdamW(t, params)
	var r Run
	for s, b := range batches {
		opt.ZeroGrad()
		loss := g.Loss(g.Forward(b.Idx, B, T), b.Tgt)
		autograd.Backward(loss)
		if s == 0 {
			r.Grads = map[string]*tensor.Tensor{}
			for _, p := range g.NamedParameters() {
				r.Grads[p.Name] = p.Param.Grad.Clone()
			}
		}
		norm, err := optim.ClipGradNorm(params, ClipNorm, 2)
		if err != nil {
			t.Fatal(err)
		}
		opt.Step()
		r.Losses = append(r.Losses, float64(loss.Value.Item()))
		r.Norms = append(r.Norms, norm)
	}
	r.Final = map[string]*tensor.Tensor{}
	for name, v := range nn.StateDict(g) {
		r.Final[name] = v.Clone()
	}
	last := batches[len(batches)-1]
	r.Eval = float64(g.Loss(g.Forward(last.Idx, B, T), last.Tgt).Value.Item())
	return r
}

// MaxDiff is the largest absolute difference between a and b, +Inf when
// either is missing or their shapes differ.
func MaxDiff(a, b *tensor.Tensor) float64 {
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

// Compare fails unless a parallel run equals one process's to float32
// rounding: the same number of steps and tensors, losses within 2e-5,
// gradient norms within 1e-5 relative, first-step gradients within 1e-4
// of each tensor's largest entry, final parameters within 6e-5; and
// clipping must have been exercised. evaluated also compares the Eval
// losses (within 2e-5). Rank 0 logs the differences.
func Compare(t testing.TB, rank int, got, ref Run, evaluated bool) {
	t.Helper()
	if len(got.Losses) != len(ref.Losses) {
		t.Fatalf("rank %d: %d steps, want %d", rank, len(got.Losses), len(ref.Losses))
	}
	var dl, dn float64
	clipped := 0
	for s := range ref.Losses {
		dl = max(dl, math.Abs(got.Losses[s]-ref.Losses[s]))
		dn = max(dn, math.Abs(got.Norms[s]-ref.Norms[s])/ref.Norms[s])
		if ref.Norms[s] > ClipNorm {
			clipped++
		}
	}
	// Gradients relative to each tensor's largest entry; parameters after
	// the steps absolutely (AdamW moves each by about lr per step).
	var dg, dp float64
	worstG, worstP := "", ""
	for name, want := range ref.Grads {
		scale := 0.0
		for _, v := range want.Data() {
			scale = max(scale, math.Abs(float64(v)))
		}
		if d := MaxDiff(got.Grads[name], want) / max(scale, 1e-12); d > dg {
			dg, worstG = d, name
		}
	}
	for name, want := range ref.Final {
		if d := MaxDiff(got.Final[name], want); d > dp {
			dp, worstP = d, name
		}
	}
	de := math.Abs(got.Eval - ref.Eval)
	if rank == 0 {
		msg := fmt.Sprintf("max |Δloss| %.3g over %d steps; gradient norm max relative Δ %.3g (clipped at %d of %d steps); first-step gradients max relative Δ %.3g (%s); final parameters max |Δ| %.3g (%s)",
			dl, len(ref.Losses), dn, clipped, len(ref.Losses), dg, worstG, dp, worstP)
		if evaluated {
			msg += fmt.Sprintf("; eval |Δ| %.3g", de)
		}
		t.Log(msg)
	}
	if len(got.Final) != len(ref.Final) || len(got.Grads) != len(ref.Grads) {
		t.Errorf("rank %d: gathered %d parameters and %d gradients, the model has %d", rank, len(got.Final), len(got.Grads), len(ref.Final))
	}
	if clipped == 0 {
		t.Errorf("the gradient norm never exceeded %g: clipping was not exercised", ClipNorm)
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
		t.Errorf("rank %d: parameter %s differs from one process by %g after %d steps", rank, worstP, dp, len(ref.Losses))
	}
	if evaluated && de > 2e-5 {
		t.Errorf("rank %d: Eval loss %v, one process %v", rank, got.Eval, ref.Eval)
	}
}

// Saved is a Run in a gob-friendly form: what a rank process writes for
// its parent to compare.
type Saved struct {
	Losses, Norms []float64
	Grads, Final  map[string][]float32
	Shapes        map[string][]int
	Eval          float64
}

// Save returns r in its gob-friendly form.
func (r Run) Save() Saved {
	s := Saved{Losses: r.Losses, Norms: r.Norms, Eval: r.Eval, Grads: map[string][]float32{}, Final: map[string][]float32{}, Shapes: map[string][]int{}}
	for name, g := range r.Grads {
		s.Grads[name] = g.Contiguous().Data()
		s.Final[name] = r.Final[name].Contiguous().Data()
		s.Shapes[name] = g.Shape()
	}
	return s
}

// Run returns the Run s was saved from.
func (s Saved) Run() Run {
	r := Run{Losses: s.Losses, Norms: s.Norms, Eval: s.Eval, Grads: map[string]*tensor.Tensor{}, Final: map[string]*tensor.Tensor{}}
	for name, v := range s.Grads {
		r.Grads[name] = tensor.FromSlice(v, s.Shapes[name]...)
		r.Final[name] = tensor.FromSlice(s.Final[name], s.Shapes[name]...)
	}
	return r
}
