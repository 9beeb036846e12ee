package layout_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/cohortml/cohort/distributed"
	"github.com/cohortml/cohort/distributed/distributedtest"
	"github.com/cohortml/cohort/layout"
	"github.com/cohortml/cohort/models"
	"github.com/cohortml/cohort/models/gpttest"
)

// TestBadConfig: a layout that does not fit the world, the batch or the
// model gets, on every rank, an error naming the sizes, never a hang.
func TestBadConfig(t *testing.T) {
	for _, tc := range []struct {
		name  string
		world int
		cfg   layout.Config
		model func(*models.GPTConfig)
		want  string
	}{
		{"mesh-not-world", 4, layout.Config{DP: 2, PP: 2, TP: 2, Batch: 4, SeqLen: 8},
			nil, "dp 2 × pp 2 × tp 2 = 8 ranks, but the process group has 4"},
		{"microbatches-not-dividing", 2, layout.Config{PP: 2, Microbatches: 3, Batch: 4, SeqLen: 8},
			nil, "3 microbatches do not divide a batch of 4 sequences"},
		{"more-stages-than-layers", 4, layout.Config{PP: 4, Microbatches: 4, Batch: 4, SeqLen: 8},
			func(c *models.GPTConfig) { c.NLayer = 2 }, "4 pipeline stages (pp 4 × 1 per rank) for 2 layers"},
		{"virtual-stages-beyond-layers", 2, layout.Config{PP: 2, Schedule: "interleaved", Virtual: 3, Microbatches: 2, Batch: 4, SeqLen: 8},
			nil, "6 pipeline stages (pp 2 × 3 per rank) for 4 layers"},
		{"heads-not-dividing", 3, layout.Config{TP: 3, Batch: 4, SeqLen: 8},
			nil, "4 heads do not split across 3 tensor-parallel ranks"},
		{"unknown-schedule", 2, layout.Config{PP: 2, Schedule: "zigzag", Batch: 4, SeqLen: 8},
			nil, `unknown schedule "zigzag"`},
		{"sequence-beyond-context", 1, layout.Config{Batch: 4, SeqLen: 65},
			nil, "sequence length 65 exceeds the model's context 64"},
		{"bad-split", 2, layout.Config{PP: 2, Batch: 4, SeqLen: 8, Split: []int{0, 1, 2, 4}},
			nil, "split [0 1 2 4] has 3 stages, the layout has 2"},
		{"no-batch", 1, layout.Config{SeqLen: 8}, nil, "batch 0 × sequence length 8"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := models.GPTMini()
			if tc.model != nil {
				tc.model(&cfg)
			}
			errs := buildErrors(t, tc.world, cfg, func(int) layout.Config { return tc.cfg })
			for r, err := range errs {
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Errorf("rank %d: error %v, want one containing %q", r, err, tc.want)
				}
			}
		})
	}
}

// buildErrors builds a Trainer of a model of cfg on each rank of a world
// of goroutines, rank r under layout(r), and returns each rank's error.
func buildErrors(t *testing.T, world int, cfg models.GPTConfig, layoutOf func(rank int) layout.Config) []error {
	t.Helper()
	errs := make([]error, world)
	distributedtest.Run(t, world, func(t *testing.T, pg distributed.ProcessGroup) {
		ctx := distributedtest.Context(t, 30*time.Second)
		tr, err := layout.Build(ctx, pg, layoutOf(pg.Rank()), gpttest.NewGPT(t, cfg))
		if err == nil {
			tr.Close()
		}
		errs[pg.Rank()] = err
	})
	return errs
}

// TestRanksDisagree: ranks built with different layouts, or where only
// some ranks' layout is invalid, all get an error naming the other ranks.
func TestRanksDisagree(t *testing.T) {
	for _, tc := range []struct {
		name         string
		odd          int // the rank whose config has microbatches (the others 2)
		microbatches int
		want         []string // by rank
	}{
		{"microbatches", 1, 4, []string{"rank(s) 1 have another", "rank(s) 0 have another"}},
		{"invalid-on-one-rank", 0, 3, []string{"3 microbatches do not divide", "invalid on rank(s) 0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := func(r int) layout.Config {
				c := layout.Config{PP: 2, Microbatches: 2, Batch: 4, SeqLen: 8}
				if r == tc.odd {
					c.Microbatches = tc.microbatches
				}
				return c
			}
			for r, err := range buildErrors(t, 2, models.GPTMini(), cfg) {
				if err == nil || !strings.Contains(err.Error(), tc.want[r]) {
					t.Errorf("rank %d: error %v, want one containing %q", r, err, tc.want[r])
				}
			}
		})
	}
}

// TestStepBadBatch: a batch of the wrong size is an error naming it.
func TestStepBadBatch(t *testing.T) {
	distributedtest.Run(t, 1, func(t *testing.T, pg distributed.ProcessGroup) {
		ctx := distributedtest.Context(t, 30*time.Second)
		full := gpttest.NewGPT(t, models.GPTMini())
		ids := make([]int64, 8)
		for _, tc := range []struct {
			name string
			call func(*layout.Trainer) error
			want string
		}{
			{"step-one-sequence-for-two", func(tr *layout.Trainer) error { _, err := tr.Step(ctx, ids, ids); return err }, "8 token ids for batch 2 × length 8"},
			{"eval-partial-sequence", func(tr *layout.Trainer) error { _, err := tr.Eval(ctx, ids[:5], ids[:5]); return err }, "not whole sequences of length 8"},
		} {
			tr, err := layout.Build(ctx, pg, layout.Config{Batch: 2, SeqLen: 8}, full)
			if err != nil {
				t.Fatal(err)
			}
			if err := tc.call(tr); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s: error %v, want one containing %q", tc.name, err, tc.want)
			}
			tr.Close()
		}
	})
}

// TestRankFails: when one rank's step fails (here its context is already
// cancelled), every rank's Step returns an error promptly instead of
// hanging, and the Trainer stays broken.
func TestRankFails(t *testing.T) {
	cfg := layout.Config{DP: 2, PP: 2, TP: 2, Microbatches: 2, Schedule: "1f1b", Batch: 2, SeqLen: 8}
	errs := make([]error, 8)
	elapsed := make([]time.Duration, 8)
	distributedtest.Run(t, 8, func(t *testing.T, pg distributed.ProcessGroup) {
		ctx := distributedtest.Context(t, time.Minute)
		tr := buildMini(t, ctx, pg, cfg)
		defer tr.Close()
		ids := make([]int64, cfg.Batch*cfg.SeqLen)
		stepCtx := ctx
		if pg.Rank() == 3 {
			c, cancel := context.WithCancel(ctx)
			cancel()
			stepCtx = c
		}
		start := time.Now()
		var err error
		for range 2 {
			if _, err = tr.Step(stepCtx, ids, ids); err != nil {
				break
			}
			if _, err = tr.ClipGradNorm(stepCtx, 1); err != nil {
				break
			}
		}
		errs[pg.Rank()], elapsed[pg.Rank()] = err, time.Since(start)
		if err != nil {
			if _, again := tr.Step(ctx, ids, ids); again == nil {
				t.Errorf("rank %d: Step after a failure succeeded", pg.Rank())
			}
		}
	})
	for r, err := range errs {
		if err == nil {
			t.Errorf("rank %d: no error although rank 3 failed", r)
			continue
		}
		t.Logf("rank %d after %v: %v", r, elapsed[r].Round(time.Millisecond), err)
		if elapsed[r] > 20*time.Second {
			t.Errorf("rank %d took %v to notice rank 3's failure", r, elapsed[r])
		}
	}
}
