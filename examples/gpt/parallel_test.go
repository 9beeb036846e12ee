package main

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cohortml/cohort/checkpoint"
	"github.com/cohortml/cohort/distributed"
	"github.com/cohortml/cohort/distributed/distributedtest"
	"github.com/cohortml/cohort/layout"
	"github.com/cohortml/cohort/models"
	"github.com/cohortml/cohort/obs/trace"
	"github.com/cohortml/cohort/recipe/parallel"
)

// deep is a tiny model with enough layers for 2 pipeline ranks of 2
// virtual stages each, and heads, vocabulary and MLP width that split over
// 2 tensor-parallel ranks.
var deep = models.GPTConfig{Vocab: 256, Ctx: 16, NLayer: 4, D: 16, NHead: 2}

// layoutRun is the outcome of one run of train on goroutine ranks.
type layoutRun struct {
	ranks []curve
	outs  []bytes.Buffer
	errs  []error
}

// runRanks runs train with c on world goroutine ranks.
func runRanks(t *testing.T, world int, c config) *layoutRun {
	t.Helper()
	r := &layoutRun{ranks: make([]curve, world), outs: make([]bytes.Buffer, world), errs: make([]error, world)}
	distributedtest.Run(t, world, func(t *testing.T, pg distributed.ProcessGroup) {
		r.ranks[pg.Rank()], r.errs[pg.Rank()] = train(distributedtest.Context(t, 2*time.Minute), c, pg, &r.outs[pg.Rank()])
	})
	return r
}

// ok fails the test if any rank failed.
func (r *layoutRun) ok(t *testing.T) {
	t.Helper()
	for rank, err := range r.errs {
		if err != nil {
			t.Fatalf("rank %d: %v\noutput:\n%s", rank, err, r.outs[0].String())
		}
	}
}

// meanTrain returns the mean over the ranks of the step's training loss
// (under ddp each rank has its own; under layout every rank has the job's).
func (r *layoutRun) meanTrain(step int) float64 {
	m := 0.0
	for _, tr := range r.ranks {
		m += tr.train[step] / float64(len(r.ranks))
	}
	return m
}

// sameCurve reports every step whose loss differs from want's by more than
// tol, and every rank whose validation losses do, and logs the largest
// difference.
func sameCurve(t *testing.T, got, want *layoutRun, from, steps int, vals []int, tol float64) {
	t.Helper()
	worst := 0.0
	check := func(what string, g, w float64, gok, wok bool) {
		t.Helper()
		d := math.Abs(g - w)
		if !gok || !wok || !(d <= tol) {
			t.Errorf("%s: %.7f (recorded %v), want %.7f (recorded %v)", what, g, gok, w, wok)
		}
		worst = max(worst, d)
	}
	for step := from; step <= steps; step++ {
		_, gok := got.ranks[0].train[step]
		_, wok := want.ranks[0].train[step]
		check(fmt.Sprintf("step %d: train loss", step), got.meanTrain(step), want.meanTrain(step), gok, wok)
	}
	for _, step := range vals {
		w, wok := want.ranks[0].val[step]
		for rank, tr := range got.ranks {
			g, gok := tr.val[step]
			check(fmt.Sprintf("step %d: rank %d val loss", step, rank), g, w, gok, wok)
		}
	}
	t.Logf("largest difference from the reference: %.2g", worst)
}

// TestLayoutsEqualOneProcess trains the same model under every kind of
// layout, as goroutine ranks over the in-process transport, and checks
// that each follows one process (with the same global batch) step by step
// and in validation, within float32 rounding, and that only rank 0
// reports, ending with the val loss.
func TestLayoutsEqualOneProcess(t *testing.T) {
	path := opticksHead(t, 20_000) // 124 validation windows: 2 batches
	const steps, batch = 3, 4
	base := config{steps: steps, batch: batch, seed: 3, logEvery: 2, evalEvery: 2, data: path, model: deep}
	single := map[int]*layoutRun{} // by global batch
	oneProcess := func(t *testing.T, globalBatch int) *layoutRun {
		if r, ok := single[globalBatch]; ok {
			return r
		}
		c := base
		c.batch = globalBatch
		r := runRanks(t, 1, c)
		r.ok(t)
		single[globalBatch] = r
		return r
	}
	for _, tc := range []struct {
		name   string
		world  int
		layout func(*config)
	}{
		{"dp=2", 2, func(c *config) {}},
		{"microbatches=4", 1, func(c *config) { c.microbatches = 4 }},
		{"dp=2/microbatches=2", 2, func(c *config) { c.microbatches = 2 }},
		{"pp=2/gpipe", 2, func(c *config) { c.pp, c.schedule = 2, "gpipe" }},
		{"pp=2/1f1b", 2, func(c *config) { c.pp, c.schedule = 2, "1f1b" }},
		{"pp=2/interleaved", 2, func(c *config) { c.pp, c.schedule = 2, "interleaved" }},
		{"pp=2/zb", 2, func(c *config) { c.pp, c.schedule = 2, "zb" }},
		{"pp=2/1f1b/recompute", 2, func(c *config) { c.pp, c.microbatches, c.recompute = 2, 2, true }},
		{"tp=2", 2, func(c *config) { c.tp = 2 }},
		{"dp=2×pp=2", 4, func(c *config) { c.dp, c.pp = 2, 2 }},
		{"dp=2×tp=2", 4, func(c *config) { c.dp, c.tp = 2, 2 }},
		{"pp=2×tp=2", 4, func(c *config) { c.pp, c.tp, c.schedule = 2, 2, "zb" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := base
			tc.layout(&c)
			dp := c.dp
			if dp == 0 {
				dp = tc.world / max(c.pp, 1) / max(c.tp, 1)
			}
			want := oneProcess(t, dp*batch)
			got := runRanks(t, tc.world, c)
			got.ok(t)
			sameCurve(t, got, want, 1, steps, []int{2, steps}, 2e-5)
			for rank := 1; rank < tc.world; rank++ {
				if got.outs[rank].Len() != 0 {
					t.Errorf("rank %d printed %q; only rank 0 reports", rank, got.outs[rank].String())
				}
			}
			if want := fmt.Sprintf("each batch in %d micro-batches", c.microbatches); c.pp <= 1 && c.tp <= 1 && c.microbatches > 1 && !strings.Contains(got.outs[0].String(), want) {
				t.Errorf("rank 0's report %q does not say %q", got.outs[0].String(), want)
			}
			if want := fmt.Sprintf("val loss: %.4f\n", got.ranks[0].val[steps]); !strings.HasSuffix(got.outs[0].String(), want) {
				t.Errorf("rank 0's report ends %q, want %q", got.outs[0].String(), want)
			}
		})
	}
}

// TestResumeEqualsUninterrupted stops a run right after a checkpoint, as a
// crash would, starts it again with the same flags and checks that the
// resumed run ends exactly as an uninterrupted one; a checkpoint resumes
// under another layout too (the state is saved whole).
func TestResumeEqualsUninterrupted(t *testing.T) {
	path := opticksHead(t, 20_000)
	const steps, every = 4, 2
	base := config{steps: steps, batch: 4, seed: 4, logEvery: 3, data: path, model: deep, ckptEvery: every}
	pp2 := func(c *config) { c.pp = 2 }
	pp2tp2 := func(c *config) { c.pp, c.tp, c.schedule = 2, 2, "interleaved" }
	dp2 := func(c *config) { c.dp = 2 }
	same := func(c *config) {}
	for _, tc := range []struct {
		name           string
		world, resumeW int
		first, resume  func(*config)
		tol            float64
	}{
		{"one process", 1, 1, same, same, 0},
		{"pp=2", 2, 2, pp2, pp2, 0},
		{"dp=2", 2, 2, dp2, dp2, 0},
		{"pp=2×tp=2 then one process", 4, 1, pp2tp2, same, 2e-5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			c := base
			tc.first(&c)
			c.ckptDir = filepath.Join(dir, "whole")
			whole := runRanks(t, tc.world, c)
			whole.ok(t)

			// A run that ends after step every (as a crash right after its
			// checkpoint would; the constant learning rate does not depend on
			// -steps), resumed with the same flags.
			c.ckptDir = filepath.Join(dir, "broken")
			c.steps = every
			runRanks(t, tc.world, c).ok(t)
			// A newer checkpoint with a bad manifest is skipped, and said so.
			bad := checkpoint.StepDir(filepath.Join(dir, "broken"), every+1)
			os.MkdirAll(bad, 0o755)
			os.WriteFile(filepath.Join(bad, "manifest.json"), []byte("{"), 0o644)
			c = base
			tc.resume(&c)
			c.ckptDir = filepath.Join(dir, "broken")
			resumed := runRanks(t, tc.resumeW, c)
			resumed.ok(t)
			if !strings.Contains(resumed.outs[0].String(), fmt.Sprintf("resumed at step %d from ", every)) {
				t.Errorf("rank 0 did not say it resumed at step %d:\n%s", every, resumed.outs[0].String())
			}
			if !strings.Contains(resumed.outs[0].String(), "checkpoint skipped: "+bad+": invalid manifest") {
				t.Errorf("rank 0 skipped the bad checkpoint of step %d without a word:\n%s", every+1, resumed.outs[0].String())
			}
			sameCurve(t, resumed, whole, every+1, steps, []int{steps}, tc.tol)
		})
	}
}

// TestSaveLoadsBack checks -save under a layout: the file holds the final
// weights with PyTorch's names, and a fresh model loaded from it scores the
// val loss the run printed.
func TestSaveLoadsBack(t *testing.T) {
	path := opticksHead(t, 20_000)
	for _, tc := range []struct {
		name   string
		world  int
		layout func(*config)
	}{
		{"one process", 1, func(c *config) {}},
		{"pp=2×tp=2", 4, func(c *config) { c.pp, c.tp = 2, 2 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := config{steps: 3, batch: 4, seed: 6, logEvery: 3, data: path, model: deep,
				save: filepath.Join(t.TempDir(), "gpt.safetensors")}
			tc.layout(&c)
			r := runRanks(t, tc.world, c)
			r.ok(t)
			if !strings.Contains(r.outs[0].String(), "weights saved to "+c.save) {
				t.Errorf("rank 0 did not report the saved weights:\n%s", r.outs[0].String())
			}
			m, err := models.NewGPT(rand.New(rand.NewPCG(99, 0)), deep)
			if err != nil {
				t.Fatal(err)
			}
			if err := checkpoint.LoadModel(c.save, m, checkpoint.GPTNames); err != nil {
				t.Fatal(err)
			}
			corpus, err := loadCorpus(context.Background(), path, deep.Ctx)
			if err != nil {
				t.Fatal(err)
			}
			var mu sync.Mutex
			var v float64
			distributedtest.Run(t, 1, func(t *testing.T, pg distributed.ProcessGroup) {
				par, err := parallel.NewGPT(distributedtest.Context(t, time.Minute), pg, m, layout.Config{DP: 1, PP: 1, TP: 1, Batch: 4, SeqLen: deep.Ctx})
				if err != nil {
					t.Fatal(err)
				}
				defer par.Close()
				got, err := par.ValLoss(distributedtest.Context(t, time.Minute), corpus)
				if err != nil {
					t.Fatal(err)
				}
				mu.Lock()
				v = got
				mu.Unlock()
			})
			if want := r.ranks[0].val[c.steps]; math.Abs(v-want) > 2e-5 {
				t.Errorf("the saved weights score val loss %.7f, the run printed %.7f", v, want)
			}
		})
	}
}

// TestWatch checks the obs wiring: rank 0's progress line reaches the
// last step before the val loss is printed, and with COHORT_TRACE every
// rank's timeline holds the data, forward+backward and optimizer spans.
func TestWatch(t *testing.T) {
	dir := t.TempDir()
	env := map[string]string{"COHORT_TRACE": dir}
	c := config{steps: 3, batch: 4, seed: 7, logEvery: 3, data: opticksHead(t, 20_000), model: deep, pp: 2,
		getenv: func(k string) string { return env[k] }}
	r := runRanks(t, 2, c)
	r.ok(t)
	if out := r.outs[0].String(); !strings.Contains(out, "step 3/3 (100%)") {
		t.Errorf("rank 0's output %q lacks the progress line's last step", out)
	}
	for rank := range 2 {
		b, err := os.ReadFile(filepath.Join(dir, trace.FileName(rank)))
		if err != nil {
			t.Fatal(err)
		}
		for _, span := range []string{`"batch"`, `"forward+backward"`, `"optimizer"`} {
			if n := strings.Count(string(b), span); n < 3 {
				t.Errorf("rank %d's trace has %d events named %s, want one per step (3) or more", rank, n, span)
			}
		}
	}
}

// TestLayoutErrors checks that a bad layout or a checkpoint of another run
// is an error on every rank, naming the problem, not a hang.
func TestLayoutErrors(t *testing.T) {
	path := opticksHead(t, 20_000)
	base := config{steps: 2, batch: 4, seed: 8, logEvery: 1, data: path, model: deep}
	otherRun := t.TempDir()
	c := base
	c.ckptDir, c.ckptEvery = otherRun, 1
	runRanks(t, 1, c).ok(t)
	for _, tc := range []struct {
		name   string
		world  int
		modify func(*config)
		want   string
	}{
		{"microbatches", 2, func(c *config) { c.pp, c.microbatches = 2, 3 }, "3 microbatches do not divide a batch of 4"},
		{"stages", 2, func(c *config) { c.pp, c.schedule, c.virtual = 2, "interleaved", 3 }, "6 pipeline stages"},
		{"schedule", 2, func(c *config) { c.pp, c.schedule = 2, "fast" }, "fast"},
		{"heads", 4, func(c *config) { c.tp = 4 }, "tp 4"},
		// The README once showed -dp 2 -tp 2 -schedule zb: a schedule that did nothing.
		{"schedule without stages, tensor-parallel", 2, func(c *config) { c.tp, c.schedule = 2, "zb" }, "-schedule zb needs pipeline stages (-pp 2 or more); this layout (dp 1 × tp 2) has none"},
		{"checkpoint of another run", 1, func(c *config) { c.seed, c.ckptDir, c.ckptEvery = 9, otherRun, 1 }, "is of another run"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := base
			tc.modify(&c)
			r := runRanks(t, tc.world, c)
			for rank, err := range r.errs {
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Errorf("rank %d: %v, want an error mentioning %q", rank, err, tc.want)
				}
			}
		})
	}
}
