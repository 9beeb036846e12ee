package layout_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"

	"github.com/cohortml/cohort/distributed"
	"github.com/cohortml/cohort/distributed/backend/native"
	"github.com/cohortml/cohort/distributed/transport/inproc"
	"github.com/cohortml/cohort/layout"
	"github.com/cohortml/cohort/models"
	"github.com/cohortml/cohort/optim"
)

// GPT-mini on a pp=2 × tp=2 layout, the four ranks running as goroutines
// here (as processes under `cohort run`): every rank builds the full model
// from the same seed, Build keeps its stage's shards, and each step is
// Step, ClipGradNorm and the optimizer over the rank's Parameters.
func ExampleBuild() {
	const world, B, T, steps = 4, 4, 16, 2
	cfg := layout.Config{PP: 2, TP: 2, Microbatches: 2, Schedule: "1f1b", Batch: B, SeqLen: T}
	transports := inproc.NewMesh(world)
	groups := make([]distributed.ProcessGroup, world)
	for rank := range world {
		pg, err := native.New(transports[rank], distributed.GroupOptions{})
		if err != nil {
			panic(err)
		}
		groups[rank] = pg
	}
	losses := make([]float64, world)
	var wg sync.WaitGroup
	for rank, pg := range groups {
		wg.Go(func() {
			ctx := context.Background()
			full, err := models.NewGPT(rand.New(rand.NewPCG(0, 0)), models.GPTMini())
			if err != nil {
				panic(err)
			}
			tr, err := layout.Build(ctx, pg, cfg, full)
			if err != nil {
				panic(err)
			}
			defer tr.Close()
			opt, err := optim.NewAdamW([]optim.Group{{Params: tr.Parameters(), LR: 3e-4, WeightDecay: 0.1}},
				optim.AdamOptions{Beta1: 0.9, Beta2: 0.95, Eps: 1e-8})
			if err != nil {
				panic(err)
			}
			// The same data on every rank of the replica: token t+1 follows t.
			idx, tgt := make([]int64, B*T), make([]int64, B*T)
			for i := range idx {
				idx[i], tgt[i] = int64(i%200), int64(i%200+1)
			}
			for range steps {
				loss, err := tr.Step(ctx, idx, tgt)
				if err != nil {
					panic(err)
				}
				if _, err := tr.ClipGradNorm(ctx, 1.0); err != nil {
					panic(err)
				}
				opt.Step()
				losses[rank] = loss
			}
		})
	}
	wg.Wait()
	for _, pg := range groups {
		pg.Close()
	}
	fmt.Printf("every rank reports the same loss: %v\n", losses[0] == losses[1] && losses[1] == losses[2] && losses[2] == losses[3])
	fmt.Printf("loss after %d steps: %.2f\n", steps, losses[0])
	// Output:
	// every rank reports the same loss: true
	// loss after 2 steps: 5.00
}
