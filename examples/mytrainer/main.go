// Command mytrainer is a training program of its own built on cohort: a
// model defined here, trained with data parallelism. Alone it is a world
// of one; under `cohort run --nproc-per-node 2 .` each rank trains on its
// half of every epoch and DDP averages the gradients.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"

	"github.com/cohortml/cohort/autograd"
	"github.com/cohortml/cohort/data"
	"github.com/cohortml/cohort/ddp"
	"github.com/cohortml/cohort/distributed"
	_ "github.com/cohortml/cohort/distributed/backend/all" // the native, MPI and NCCL backends
	"github.com/cohortml/cohort/distributed/rendezvous"
	"github.com/cohortml/cohort/nn"
	"github.com/cohortml/cohort/optim"
	"github.com/cohortml/cohort/tensor"
)

// ringNet classifies a point of the plane by the ring it lies in (radius
// 0-1, 1-2 or 2-3). Any type with these four methods is an nn.Layer.
type ringNet struct{ hidden, out *nn.Linear }

func newRingNet(rng *rand.Rand) *ringNet {
	return &ringNet{hidden: nn.NewLinear(rng, 2, 32, true), out: nn.NewLinear(rng, 32, 3, true)}
}

func (n *ringNet) Forward(x *autograd.Var) *autograd.Var {
	return n.out.Forward(autograd.Tanh(n.hidden.Forward(x)))
}

func (n *ringNet) NamedParameters() []nn.NamedParameter {
	return nn.ChildParameters(nn.Child{Name: "hidden", Module: n.hidden}, nn.Child{Name: "out", Module: n.out})
}
func (n *ringNet) NamedBuffers() []nn.NamedBuffer { return nil }
func (n *ringNet) SetTraining(bool)               {}

// rings returns n random points of the disc of radius 3 and their rings.
func rings(rng *rand.Rand, n int) (xy []float32, ring []int64) {
	for range n {
		r, a := 3*math.Sqrt(rng.Float64()), 2*math.Pi*rng.Float64()
		xy = append(xy, float32(r*math.Cos(a)), float32(r*math.Sin(a)))
		ring = append(ring, int64(r))
	}
	return xy, ring
}

func main() {
	epochs := flag.Int("epochs", 10, "passes over the data")
	batch := flag.Int("batch", 32, "samples per step on each rank")
	lr := flag.Float64("lr", 0.1, "SGD learning rate (momentum 0.9)")
	flag.Parse()
	// SIGINT or SIGTERM (Ctrl-C, Kubernetes, Slurm): every rank finishes
	// its step and the run exits 130 or 143; a second signal exits at once.
	stop := distributed.NotifyStop(context.Background())
	err := train(stop.Context(), stop, *epochs, *batch, *lr)
	stop.Close()
	if err != nil {
		fmt.Fprintln(os.Stderr, "mytrainer:", err)
		os.Exit(rendezvous.Fail(stop.Context(), err))
	}
}

func train(ctx context.Context, stop *distributed.Stopper, epochs, batch int, lr float64) error {
	if epochs < 1 || batch < 1 || !(lr > 0) {
		return fmt.Errorf("-epochs %d, -batch %d, -lr %g: want positive numbers", epochs, batch, lr)
	}
	// RANK, WORLD_SIZE, MASTER_ADDR, … from cohort run (or torchrun,
	// Slurm, mpirun); a world of one when they are unset.
	pg, err := distributed.InitFromEnv(ctx)
	if err != nil {
		return err
	}
	defer pg.Close()

	rng := rand.New(rand.NewPCG(1, 2)) // the same seed on every rank: the same data
	xy, ring := rings(rng, 4096)
	m, err := ddp.Wrap(ctx, newRingNet(rng), pg, ddp.Options{}) // rank 0's weights on every rank
	if err != nil {
		return err
	}
	defer m.Close()
	opt, err := optim.NewSGD([]optim.Group{{Params: nn.Parameters(m), LR: lr}}, optim.SGDOptions{Momentum: 0.9})
	if err != nil {
		return err
	}
	sampler, err := data.NewDistributedSampler(len(ring), pg.Size(), pg.Rank(), true, 7, false)
	if err != nil {
		return err
	}

	for epoch := range epochs {
		idx := sampler.Indices(epoch) // this rank's share, shuffled by seed and epoch
		var sum float64
		steps := 0
		for lo := 0; lo < len(idx); lo += batch {
			var x []float32
			var y []int64
			for _, i := range idx[lo:min(lo+batch, len(idx))] {
				x, y = append(x, xy[2*i], xy[2*i+1]), append(y, ring[i])
			}
			out, err := m.Forward(ctx, autograd.NewVar(tensor.FromSlice(x, len(y), 2), false))
			if err != nil {
				return err
			}
			loss := nn.CrossEntropy(out, y)
			if err := m.Backward(ctx, loss); err != nil { // all-reduces the gradients
				return err
			}
			opt.Step()
			opt.ZeroGrad()
			sum += float64(loss.Value.Item())
			steps++
			if halt, err := stop.ShouldStop(ctx, pg); err != nil || halt { // the ranks agree
				return errors.Join(err, stop.Err())
			}
		}
		if pg.Rank() == 0 {
			fmt.Printf("epoch %d: loss %.4f (%d ranks)\n", epoch+1, sum/float64(steps), pg.Size())
		}
	}
	return pg.Barrier(ctx).Wait() // no rank leaves while another still trains
}
