package layout_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/cohortml/cohort/distributed"
	"github.com/cohortml/cohort/distributed/distributedtest"
	"github.com/cohortml/cohort/layout"
	"github.com/cohortml/cohort/models"
	"github.com/cohortml/cohort/models/gpttest"
	"github.com/cohortml/cohort/pipeline"
	"github.com/cohortml/cohort/tp"
)

var _ pipeline.Stage = (*tp.GPTStage)(nil)

// trainLayout trains GPT-mini under cfg on this rank: each replica takes
// its rows of every global batch.
func trainLayout(ctx context.Context, pg distributed.ProcessGroup, cfg layout.Config, batches []gpttest.Batch) (gpttest.Run, error) {
	var r gpttest.Run
	full, err := models.NewGPT(gpttest.NewRNG(), models.GPTMini())
	if err != nil {
		return r, err
	}
	tr, err := layout.Build(ctx, pg, cfg, full)
	if err != nil {
		return r, err
	}
	defer tr.Close()
	opt, err := gpttest.AdamW(tr.Parameters())
	if err != nil {
		return r, err
	}
	B, T := cfg.Batch, cfg.SeqLen
	lo := tr.DataRank() * B
	for s, gb := range batches {
		b := gb.Rows(lo, lo+B, T)
		loss, err := tr.Step(ctx, b.Idx, b.Tgt)
		if err != nil {
			return r, fmt.Errorf("step %d: %w", s, err)
		}
		if s == 0 {
			if r.Grads, err = tr.FullGrads(ctx); err != nil {
				return r, err
			}
		}
		norm, err := tr.ClipGradNorm(ctx, gpttest.ClipNorm)
		if err != nil {
			return r, err
		}
		opt.Step()
		r.Losses = append(r.Losses, loss)
		r.Norms = append(r.Norms, norm)
	}
	if r.Final, err = tr.FullStateDict(ctx); err != nil {
		return r, err
	}
	last := batches[len(batches)-1].Rows(lo, lo+B, T)
	if r.Eval, err = tr.Eval(ctx, last.Idx, last.Tgt); err != nil {
		return r, err
	}
	return r, nil
}

// compare fails unless a layout's run equals one process's to float32
// rounding (the tolerances of tp's equality tests), its Eval loss included.
func compare(t *testing.T, rank int, got, ref gpttest.Run) {
	t.Helper()
	gpttest.Compare(t, rank, got, ref, true)
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
			batches := gpttest.MakeBatches(tc.steps, global, T, models.GPTMini().Vocab)
			ref := gpttest.TrainReference(t, models.GPTMini(), batches, global, T)
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
			batches := gpttest.MakeBatches(2, 4, 16, models.GPTMini().Vocab)
			distributedtest.Run(t, 4, func(t *testing.T, pg distributed.ProcessGroup) {
				ctx := distributedtest.Context(t, time.Minute)
				full := gpttest.NewGPT(t, models.GPTMini())
				tr, err := layout.Build(ctx, pg, cfg, full)
				if err != nil {
					t.Fatal(err)
				}
				defer tr.Close()
				lo := tr.DataRank() * cfg.Batch
				for s, gb := range batches {
					b := gb.Rows(lo, lo+cfg.Batch, 16)
					if _, err := tr.Step(ctx, b.Idx, b.Tgt); err != nil {
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
