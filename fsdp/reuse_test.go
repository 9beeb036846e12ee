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
// step's activations (the outputs between units are transient, as in
// GPT.Forward): the two ranks of a world allocate less than an eighth of
// what their first step did, the parameters' full gradients included.
// Through hand-written units that left the outputs between blocks
// unmarked, a steady step allocated three times what zero2's does (bench
// train --shard fsdp: 10.5 MiB a step against 3.5).
func TestGPTStepReusesMemory(t *testing.T) {
	const B, T, steps = 16, 64, 5
	var perStep [steps]uint64 // both ranks' allocations in step s (rank 0 measures)
	distributedtest.Run(t, 2, func(t *testing.T, pg distributed.ProcessGroup) {
		ctx := context.Background()
		g := dptest.NewGPT(rand.New(rand.NewPCG(3, 4)), models.GPTMini())
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
				idx[i], tgt[i] = rng.Int64N(256), rng.Int64N(256)
			}
			// the barriers bracket both ranks' steps
			if err := pg.Barrier(ctx).Wait(); err != nil {
				t.Fatal(err)
			}
			if pg.Rank() == 0 {
				runtime.ReadMemStats(&before)
			}
			out, err := m.Call(ctx, func(u *Units) *autograd.Var { return g.ForwardThrough(idx, B, T, u.Run) })
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
			if pg.Rank() == 0 {
				runtime.ReadMemStats(&after)
				perStep[s] = after.TotalAlloc - before.TotalAlloc
			}
		}
	})
	first, steady := perStep[0], perStep[steps-1]
	t.Logf("both ranks: first step %d KiB, step %d %d KiB", first>>10, steps, steady>>10)
	if steady > first/8 {
		t.Errorf("a steady step allocates %d KiB, more than an eighth of the first step's %d KiB", steady>>10, first>>10)
	}
}
