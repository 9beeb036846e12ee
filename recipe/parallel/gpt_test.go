package parallel

import (
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cohortml/cohort/datasets"
	"github.com/cohortml/cohort/distributed"
	"github.com/cohortml/cohort/distributed/distributedtest"
	"github.com/cohortml/cohort/layout"
	"github.com/cohortml/cohort/models"
	"github.com/cohortml/cohort/nn"
	"github.com/cohortml/cohort/optim"
	"github.com/cohortml/cohort/recipe"
	"github.com/cohortml/cohort/tensor"
)

var tiny = models.GPTConfig{Vocab: 256, Ctx: 8, NLayer: 2, D: 16, NHead: 2}

// corpus is a text whose windows are quick to draw and evaluate.
func corpus(t *testing.T) *datasets.ByteCorpus {
	t.Helper()
	text := []byte(strings.Repeat("Of the reflexions, refractions, inflexions and colours of light. ", 40))
	c, err := datasets.NewByteCorpus(text, tiny.Ctx)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// train runs steps of the GPT recipe under cfg on world goroutine ranks
// and returns rank 0's losses, the final validation loss and the whole
// weights and first moments gathered on rank 0.
func train(t *testing.T, world int, cfg layout.Config, steps int) (losses []float64, val float64, weights, expAvg map[string]*tensor.Tensor) {
	t.Helper()
	c := corpus(t)
	var mu sync.Mutex
	distributedtest.Run(t, world, func(t *testing.T, pg distributed.ProcessGroup) {
		ctx := distributedtest.Context(t, time.Minute)
		model, err := models.NewGPT(rand.New(rand.NewPCG(3, 0)), tiny)
		if err != nil {
			t.Fatal(err)
		}
		g, err := NewGPT(ctx, pg, model, cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer g.Close()
		opt, err := recipe.NewAdamW(g.Parameters())
		if err != nil {
			t.Fatal(err)
		}
		replica, replicas := g.Replica()
		stream, err := c.NewWindowStream(1, replicas, replica, cfg.Batch)
		if err != nil {
			t.Fatal(err)
		}
		var x, y []int64
		var mine []float64
		for range steps {
			x, y = stream.Next(x, y)
			loss, err := g.ForwardBackward(ctx, x, y)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := g.ClipGradNorm(ctx, recipe.ClipNorm); err != nil {
				t.Fatal(err)
			}
			opt.Step()
			opt.ZeroGrad()
			mine = append(mine, loss)
		}
		v, err := g.ValLoss(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		if err := g.GatherInto(ctx, model); err != nil {
			t.Fatal(err)
		}
		m1, _ := opt.Moments()
		sd, err := g.StateOf(ctx, m1)
		if err != nil {
			t.Fatal(err)
		}
		if err := g.LoadStateInto(sd, m1); err != nil { // its own state loads back
			t.Fatal(err)
		}
		if pg.Rank() == 0 {
			mu.Lock()
			losses, val, weights, expAvg = mine, v, nn.StateDict(model), sd
			mu.Unlock()
		}
	})
	return losses, val, weights, expAvg
}

func near(t *testing.T, what string, got, want, tol float64) {
	t.Helper()
	if !(math.Abs(got-want) <= tol) {
		t.Errorf("%s: %.7f, want %.7f (±%g)", what, got, want, tol)
	}
}

func closeState(t *testing.T, what string, got, want map[string]*tensor.Tensor, tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d tensors, want %d", what, len(got), len(want))
	}
	for name, w := range want {
		g := got[name]
		if g == nil || !g.SameShape(w) {
			t.Fatalf("%s: %s missing or misshapen", what, name)
		}
		for i, v := range g.Contiguous().Data() {
			if d := math.Abs(float64(v - w.Contiguous().Data()[i])); !(d <= tol) {
				t.Fatalf("%s: %s[%d] = %v, want %v", what, name, i, v, w.Contiguous().Data()[i])
			}
		}
	}
}

// Every layout trains as one process does (replicas with batch/dp each
// see the one process's windows), to float32 rounding: the losses, the
// validation, the gathered weights and the gathered AdamW moments.
func TestLayoutsEqualOneProcess(t *testing.T) {
	const steps, batch = 3, 4
	one := layout.Config{DP: 1, PP: 1, TP: 1, Microbatches: 1, Batch: batch, SeqLen: tiny.Ctx}
	wantLoss, wantVal, wantW, wantM := train(t, 1, one, steps)
	for _, tc := range []struct {
		name  string
		world int
		cfg   layout.Config
	}{
		{"accumulated in 2 micro-batches", 1, layout.Config{DP: 1, PP: 1, TP: 1, Microbatches: 2, Batch: batch, SeqLen: tiny.Ctx}},
		{"dp=2", 2, layout.Config{DP: 2, PP: 1, TP: 1, Microbatches: 1, Batch: batch / 2, SeqLen: tiny.Ctx}},
		{"pp=2", 2, layout.Config{DP: 1, PP: 2, TP: 1, Microbatches: 2, Batch: batch, SeqLen: tiny.Ctx}},
		{"tp=2", 2, layout.Config{DP: 1, PP: 1, TP: 2, Microbatches: 1, Batch: batch, SeqLen: tiny.Ctx}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			losses, val, w, m := train(t, tc.world, tc.cfg, steps)
			if len(losses) != steps || len(wantLoss) != steps {
				t.Fatalf("%d and %d losses, want %d", len(losses), len(wantLoss), steps)
			}
			if tc.cfg.DP == 1 { // a replica's loss is its own half's under dp
				for i := range losses {
					near(t, "loss", losses[i], wantLoss[i], 1e-5)
				}
			}
			near(t, "val loss", val, wantVal, 1e-5)
			closeState(t, "weights", w, wantW, 1e-5)
			closeState(t, "AdamW first moments", m, wantM, 1e-5)
		})
	}
}

// LoadStateInto checks every tensor before copying any.
func TestLoadStateIntoRejects(t *testing.T) {
	distributedtest.Run(t, 1, func(t *testing.T, pg distributed.ProcessGroup) {
		ctx := distributedtest.Context(t, time.Minute)
		model, err := models.NewGPT(rand.New(rand.NewPCG(3, 0)), tiny)
		if err != nil {
			t.Fatal(err)
		}
		g, err := NewGPT(ctx, pg, model, layout.Config{DP: 1, PP: 1, TP: 1, Batch: 1, SeqLen: tiny.Ctx})
		if err != nil {
			t.Fatal(err)
		}
		defer g.Close()
		opt, err := optim.NewAdamW([]optim.Group{{Params: g.Parameters(), LR: 1e-3}}, optim.AdamOptions{Beta1: 0.9, Beta2: 0.95, Eps: 1e-8})
		if err != nil {
			t.Fatal(err)
		}
		m1, _ := opt.Moments()
		sd, err := g.StateOf(ctx, m1)
		if err != nil {
			t.Fatal(err)
		}
		sd["wte"] = tensor.New(3)
		if err := g.LoadStateInto(sd, m1); err == nil || !strings.Contains(err.Error(), "wte") {
			t.Errorf("a misshapen wte: %v, want an error naming it", err)
		}
		if _, err := g.StateOf(ctx, m1[1:]); err == nil {
			t.Error("StateOf with a tensor missing: no error")
		}
	})
}
