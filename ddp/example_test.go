package ddp_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"

	"github.com/cohortml/cohort/autograd"
	"github.com/cohortml/cohort/ddp"
	"github.com/cohortml/cohort/distributed"
	"github.com/cohortml/cohort/distributed/backend/native"
	"github.com/cohortml/cohort/distributed/transport/inproc"
	"github.com/cohortml/cohort/models"
	"github.com/cohortml/cohort/nn"
	"github.com/cohortml/cohort/optim"
	"github.com/cohortml/cohort/tensor"
)

// Two ranks (goroutines here; processes under `cohort run`) train the
// anchor MLP on their own batches. Each starts from different weights;
// Wrap copies rank 0's, and averaging the gradients keeps the replicas
// identical.
func Example() {
	const world = 2
	mesh := inproc.NewMesh(world)
	final := make([][]float32, world)
	var wg sync.WaitGroup
	for rank := range world {
		wg.Go(func() {
			ctx := context.Background()
			pg, err := native.New(mesh[rank], distributed.GroupOptions{})
			if err != nil {
				panic(err)
			}
			defer pg.Close()
			net := models.MLP(rand.New(rand.NewPCG(uint64(rank), 0)))
			m, err := ddp.Wrap(ctx, net, pg, ddp.Options{GradientAsBucketView: true})
			if err != nil {
				panic(err)
			}
			opt, err := optim.NewSGD([]optim.Group{{Params: nn.Parameters(m), LR: 0.01}}, optim.SGDOptions{Momentum: 0.9})
			if err != nil {
				panic(err)
			}
			rng := rand.New(rand.NewPCG(42, uint64(rank))) // this rank's data
			for range 3 {
				x := tensor.New(8, 784)
				x.FillNormal(rng, 0, 1)
				y := make([]int64, 8)
				for i := range y {
					y[i] = int64(rng.IntN(10))
				}
				out, err := m.Forward(ctx, autograd.NewVar(x, false))
				if err != nil {
					panic(err)
				}
				if err := m.Backward(ctx, autograd.CrossEntropy(out, y, autograd.CrossEntropyOptions{})); err != nil {
					panic(err)
				}
				opt.Step()
				opt.ZeroGrad()
			}
			final[rank] = net.NamedParameters()[0].Param.Value.Data()
		})
	}
	wg.Wait()
	same := true
	for i := range final[0] {
		same = same && final[0][i] == final[1][i]
	}
	fmt.Println("replicas identical:", same)
	// Output: replicas identical: true
}
