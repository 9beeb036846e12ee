package fsdp

import (
	"context"
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/cohortml/cohort/autograd"
	"github.com/cohortml/cohort/distributed"
	"github.com/cohortml/cohort/distributed/distributedtest"
	"github.com/cohortml/cohort/internal/dp/dptest"
	"github.com/cohortml/cohort/models"
)

// A steady fsdp step of GPT-mini through GPT.ForwardThrough reuses last
// step's activations: the outputs between units are transient, as in
// GPT.Forward. Through units written by hand that leave those outputs
// unmarked, a steady step allocates them afresh (bench train --shard fsdp:
// 10.5 MiB a step against zero2's 3.5). Both are measured here in one
// process, the mean of the last steps of a world of 2 (the transport's
// own allocations vary from step to step): the marked forward must save
// at least half of the outputs' bytes. (16 sequences: two ranks of one
// process share tensor's free list, which keeps 64 buffers of a size.)
func TestGPTStepReusesMemory(t *testing.T) {
	const B, T, steps, measured = 16, 64, 6, 3
	cfg := models.GPTMini()
	unmarked := func(g *models.GPT, idx []int64) func(u *Units) *autograd.Var {
		return func(u *Units) *autograd.Var {
			h := autograd.Add(autograd.Embedding(g.Wte, idx, B, T), autograd.Narrow(g.Wpe, 0, 0, T))
			for i, b := range g.Blocks {
				h = u.Run(i, h, b.Forward)
			}
			return autograd.Linear(g.LNF.Forward(h), g.Wte, nil)
		}
	}
	marked := func(g *models.GPT, idx []int64) func(u *Units) *autograd.Var {
		return func(u *Units) *autograd.Var { return g.ForwardThrough(idx, B, T, u.Run) }
	}
	steady := func(forward func(*models.GPT, []int64) func(*Units) *autograd.Var) uint64 {
		var total uint64 // both ranks' allocations over the measured steps (rank 0 reads them)
		distributedtest.Run(t, 2, func(t *testing.T, pg distributed.ProcessGroup) {
			ctx := context.Background()
			g := dptest.NewGPT(rand.New(rand.NewPCG(3, 4)), cfg)
			m, err := Wrap(ctx, g, dptest.GPTUnits(g), pg, Options{Optimizer: adamW})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			rng := rand.New(rand.NewPCG(uint64(pg.Rank()), 9))
			idx, tgt := make([]int64, B*T), make([]int64, B*T)
			var before, after runtime.MemStats
			for s := range steps {
				for i := range idx {
					idx[i], tgt[i] = rng.Int64N(int64(cfg.Vocab)), rng.Int64N(int64(cfg.Vocab))
				}
				// the barriers bracket both ranks' steps
				if err := pg.Barrier(ctx).Wait(); err != nil {
					t.Fatal(err)
				}
				if s == steps-measured && pg.Rank() == 0 {
					runtime.ReadMemStats(&before)
				}
				out, err := m.Call(ctx, forward(g, idx))
				if err != nil {
					t.Fatal(err)
				}
				if err := m.Backward(ctx, g.Loss(out, tgt)); err != nil {
					t.Fatal(err)
				}
				if err := dptest.ClipStep(ctx, m, 1); err != nil {
					t.Fatal(err)
				}
				if err := pg.Barrier(ctx).Wait(); err != nil {
					t.Fatal(err)
				}
			}
			if pg.Rank() == 0 {
				runtime.ReadMemStats(&after)
				total = after.TotalAlloc - before.TotalAlloc
			}
		})
		return total / measured
	}
	without, with := steady(unmarked), steady(marked)
	// the outputs between units: the embeddings', each block's and the
	// final LayerNorm's, B·T·D floats each, on each of 2 ranks
	outputs := uint64(2*(cfg.NLayer+2)) * B * T * uint64(cfg.D) * 4
	t.Logf("both ranks, a steady step: %d KiB through hand-written units, %d KiB through ForwardThrough; the outputs between units %d KiB",
		without>>10, with>>10, outputs>>10)
	if with+outputs/2 > without {
		t.Errorf("ForwardThrough saves %d KiB a step, want at least half of the %d KiB of outputs between units",
			(int64(without)-int64(with))>>10, outputs>>10)
	}
}
