package tp_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"

	"github.com/cohortml/cohort/distributed"
	"github.com/cohortml/cohort/distributed/backend/native"
	"github.com/cohortml/cohort/distributed/transport/inproc"
	"github.com/cohortml/cohort/models"
	"github.com/cohortml/cohort/nn"
	"github.com/cohortml/cohort/optim"
	"github.com/cohortml/cohort/tp"
)

// One training step of GPT-mini split over a dp=2 × tp=2 mesh, the four
// ranks running as goroutines here (as processes under `cohort run`):
// every rank builds the full model from the same seed and keeps its
// shard; gradients are averaged over the dp group, clipped with the norm
// of the whole model and applied with AdamW.
func ExampleGPT() {
	const world, B, T = 4, 2, 16
	transports := inproc.NewMesh(world)
	losses := make([]float32, world)
	groups := make([]distributed.ProcessGroup, world)
	for rank := range world {
		pg, err := native.New(transports[rank], distributed.GroupOptions{})
		if err != nil {
			panic(err)
		}
		groups[rank] = pg
	}
	var wg sync.WaitGroup
	for rank, pg := range groups {
		wg.Go(func() {
			ctx := context.Background()
			mesh, err := distributed.NewMesh(ctx, pg, distributed.MeshDim{Name: "dp", Size: 2}, distributed.MeshDim{Name: "tp", Size: 2})
			if err != nil {
				panic(err)
			}
			full, err := models.NewGPT(rand.New(rand.NewPCG(0, 0)), models.GPTMini())
			if err != nil {
				panic(err)
			}
			m, err := tp.NewGPT(mesh.Group("tp"), full)
			if err != nil {
				panic(err)
			}
			opt, err := optim.NewAdamW([]optim.Group{{Params: nn.Parameters(m), LR: 3e-4, WeightDecay: 0.1}},
				optim.AdamOptions{Beta1: 0.9, Beta2: 0.95, Eps: 1e-8})
			if err != nil {
				panic(err)
			}
			// This dp rank's batch (the same on both ranks of a tp group).
			rng := rand.New(rand.NewPCG(uint64(mesh.Coord("dp")), 1))
			idx, tgt := make([]int64, B*T), make([]int64, B*T)
			for i := range idx {
				idx[i], tgt[i] = int64(rng.IntN(256)), int64(rng.IntN(256))
			}

			opt.ZeroGrad()
			logits, err := m.Forward(ctx, idx, B, T) // [B, T, 256/2]: this rank's vocabulary half
			if err != nil {
				panic(err)
			}
			loss, err := m.Loss(ctx, logits, tgt)
			if err != nil {
				panic(err)
			}
			if err := m.Backward(loss); err != nil {
				panic(err)
			}
			for _, p := range nn.Parameters(m) {
				if err := mesh.Group("dp").AllReduce(ctx, distributed.FromTensor(p.Grad), distributed.Avg).Wait(); err != nil {
					panic(err)
				}
			}
			if _, err := m.ClipGradNorm(ctx, 1.0); err != nil {
				panic(err)
			}
			opt.Step()
			losses[rank] = loss.Value.Item()
		})
	}
	wg.Wait()
	for _, pg := range groups {
		pg.Close() // closes the mesh's subgroups too
	}
	fmt.Println("tp ranks agree on the loss:", losses[0] == losses[1] && losses[2] == losses[3])
	// Output: tp ranks agree on the loss: true
}
