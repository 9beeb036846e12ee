// Command mnist trains the anchor MLP or LeNet CNN on MNIST with SGD
// (momentum 0.9, cosine-annealed) and reports the test accuracy, alone or
// as the ranks of a data-parallel job (a DistributedSampler share of each
// epoch per rank, gradients averaged by ddp, rank 0 evaluating):
//
//	go run ./examples/mnist -model cnn -epochs 1
//	go run ./cmd/cohort run --nproc-per-node 2 ./examples/mnist -epochs 1
//
// The data is the GoMNIST module's copy unless -data names a directory of
// IDX files. -save writes the final weights under PyTorch's nn.Sequential
// names. -checkpoint-dir DIR (on a file system all ranks see) saves the
// training state every -checkpoint-every steps; a run with the same flags
// resumes from it, bit for bit at the same world size; at another, the
// samples of the epoch no rank reached are dealt among the new ranks
// (data.Position) and the schedule fits the new number of steps. Package
// obs watches it: a progress line, COHORT_TRACE=DIR, COHORT_DASHBOARD.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"time"

	"github.com/cohortml/cohort/checkpoint"
	"github.com/cohortml/cohort/data"
	"github.com/cohortml/cohort/datasets"
	"github.com/cohortml/cohort/ddp"
	"github.com/cohortml/cohort/device/cudatensor"
	"github.com/cohortml/cohort/distributed"
	_ "github.com/cohortml/cohort/distributed/backend/all" // the native, MPI and NCCL backends
	"github.com/cohortml/cohort/nn"
	"github.com/cohortml/cohort/obs"
	"github.com/cohortml/cohort/optim"
	"github.com/cohortml/cohort/recipe"
)

type config struct {
	model         string
	epochs, batch int
	lr            float64
	seed          uint64
	dir           string
	limit         int    // training samples used, 0: all
	device        string // where to train: "cpu" (or ""), "cuda", "cuda:N"
	dtype         string // the products' dtype: "fp32" (or "") or "bf16" (recipe.ParseDType)

	save      string // final weights as safetensors, "": none
	ckptDir   string // training-state checkpoints, "": none
	ckptEvery int    // steps between checkpoints
	ckptKeep  int    // checkpoints kept

	stop        *distributed.Stopper    // ends the run after a step when a signal came; nil: never
	verifyEvery int                     // the divergence guard's period in steps (ddp.Options.VerifyEvery), 0: off
	getenv      func(key string) string // the environment obs reads (COHORT_TRACE, COHORT_DASHBOARD, …); nil: none
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
	flag.StringVar(&c.device, "device", "cpu", "where to train: cpu, cuda or cuda:N")
	flag.StringVar(&c.dtype, "dtype", "fp32", "fp32, or bf16: bfloat16 autocast (matrix products in bfloat16 with float32 accumulation; float32 weights, gradients and optimizer)")
	flag.StringVar(&c.save, "save", "", "write the final weights to this safetensors file (PyTorch nn.Sequential names)")
	warnCheckpointFlags := recipe.CheckpointFlags(flag.CommandLine, "mnist", &c.ckptDir, &c.ckptEvery, &c.ckptKeep)
	flag.IntVar(&c.verifyEvery, "verify-every", 0, "check every N steps that all ranks' parameters are equal, stopping the job naming the rank and parameter that diverged (0: never)")
	flag.Parse()
	warnCheckpointFlags(os.Stderr)
	// Under mpirun/srun, "[rank N] " starts the error line and the
	// library's log lines, as it does obs.Run.Out's.
	prefix := obs.FromEnv(os.Getenv, obs.Options{}).LinePrefix
	distributed.Main("mnist", prefix, func(ctx context.Context, stop *distributed.Stopper) error {
		c.stop = stop
		return run(ctx, c, os.Stdout)
	})
}

func run(ctx context.Context, c config, out io.Writer) error {
	if err := c.validate(); err != nil {
		return err
	}
	if c.getenv == nil {
		c.getenv = os.Getenv
	}
	dev, err := cudatensor.Open(c.device)
	if err != nil {
		return err // before any data is loaded
	}
	// The job's process group: the launcher's world, or a world of one;
	// nccl for a GPU unless COHORT_BACKEND names a backend.
	pg, err := distributed.InitFromEnvOn(ctx, dev)
	if err != nil {
		return err
	}
	defer pg.Close()
	return train(ctx, c, pg, out)
}

// validate checks the flags before anything is loaded or joined: every
// mistake it can see is reported at once, not after the data has loaded.
func (c config) validate() error {
	if c.model != "mlp" && c.model != "cnn" {
		return fmt.Errorf("-model %q: want mlp or cnn", c.model)
	}
	if c.epochs < 1 || c.batch < 1 || c.limit < 0 {
		return fmt.Errorf("-epochs %d, -batch %d, -limit %d: want positive values (limit may be 0)", c.epochs, c.batch, c.limit)
	}
	if !(c.lr > 0) || math.IsInf(c.lr, 0) {
		return fmt.Errorf("-lr %g: want a finite learning rate > 0", c.lr)
	}
	// The exact bound (this rank's share) is checked once the set is
	// loaded; the obvious cases now.
	switch {
	case c.limit > 0 && c.batch > c.limit:
		return fmt.Errorf("-batch %d is larger than the %d samples of -limit: an epoch would be one short step", c.batch, c.limit)
	case c.dir == "" && c.batch > 60000:
		return fmt.Errorf("-batch %d is larger than MNIST's 60000 training samples: an epoch would be one short step", c.batch)
	}
	if c.verifyEvery < 0 {
		return fmt.Errorf("-verify-every %d: want a number of steps, or 0 for never", c.verifyEvery)
	}
	if c.ckptDir != "" && (c.ckptEvery < 1 || c.ckptKeep < 0) {
		return fmt.Errorf("-checkpoint-every %d, -checkpoint-keep %d: want a positive interval and a count ≥ 0", c.ckptEvery, c.ckptKeep)
	}
	return nil
}

// train runs the job (c valid) as one rank of pg.
func train(ctx context.Context, c config, pg distributed.ProcessGroup, out io.Writer) error {
	dev, err := cudatensor.Open(c.device)
	if err != nil {
		return err
	}
	rank, world := pg.Rank(), pg.Size()
	pcg := rand.NewPCG(c.seed, 0)
	net, err := recipe.NewClassifier(c.model, rand.New(pcg))
	if err != nil {
		return err
	}
	model, shape := net.Model, net.Shape
	if err := recipe.UseDType(model, c.dtype, rank, os.Stderr); err != nil {
		return err
	}
	trainSet, test, err := c.load(ctx)
	if err != nil {
		return err
	}

	// Resume: every rank opens the newest complete checkpoint before
	// Wrap, which no rank passes before all have arrived, so all load the
	// same one.
	resume, skipped, err := checkpoint.Resume(c.ckptDir, jobOf(c))
	if err != nil {
		return err
	}
	if resume != nil {
		defer resume.Close()
		if err := resume.LoadModule("model", model, nil); err != nil {
			return err
		}
	}
	nn.To(model, dev)

	lr := c.lr * math.Sqrt(float64(c.batch*world)/64)
	sampler, err := data.NewDistributedSampler(trainSet.Len(), world, rank, true, c.seed, false)
	if err != nil {
		return err
	}
	if c.batch > sampler.Len() {
		return fmt.Errorf("-batch %d is larger than this rank's %d samples (%d training samples over %d ranks): an epoch would be one short step",
			c.batch, sampler.Len(), trainSet.Len(), world)
	}
	// The schedule's length: the job's steps at its first world size, or,
	// after a resize (the samples of the epoch no rank reached dealt among
	// this world), the steps done plus those left at the new size.
	tmax, step, pos, resized := c.epochs*((sampler.Len()+c.batch-1)/c.batch), 0, data.StartOf(0, world), false
	if resume != nil {
		step = int(resume.Step())
		if err := errors.Join(resume.Meta("tmax", &tmax), resume.Local(0, "data", &pos)); err != nil {
			return err
		}
		left := 0
		if left, resized, err = pos.Resume(world, c.epochs, trainSet.Len(), c.seed, rank, c.batch); err != nil {
			return fmt.Errorf("checkpoint %s: %w", resume.Dir, err)
		} else if resized {
			tmax = step + left
		}
	}

	// Watching the run: rank 0's progress bar, the run page
	// (COHORT_DASHBOARD), this rank's timeline (COHORT_TRACE).
	ob, err := obs.Start(ctx, obs.FromEnv(c.getenv, obs.Options{Name: "mnist " + c.model, Rank: rank, WorldSize: world, Job: distributed.JobID(pg), TotalSteps: tmax, Progress: out}))
	if err != nil {
		return err
	}
	defer ob.Close()
	out = ob.Out() // the bar cleared around each line; "[rank N] " under mpirun

	// Wrap copies rank 0's initial parameters to every rank; gradients
	// become views into the buckets that are all-reduced.
	o := ddp.Options{GradientAsBucketView: dev.IsCPU(), VerifyEvery: c.verifyEvery, Span: ob.Tracer().SpanFunc()} // bucket views are host memory
	m, err := ddp.Wrap(ctx, model, pg, o)
	if err != nil {
		return err
	}
	defer m.Close()
	opt, err := recipe.NewSGD(nn.Parameters(m), lr)
	if err != nil {
		return err
	}
	sched, err := optim.NewScheduler(opt, optim.CosineAnnealingLR{TMax: max(tmax, 1)})
	if err != nil {
		return err
	}
	if resume != nil {
		from := rank
		if from >= resume.WorldSize() {
			from = 0 // a rank the saving job did not have takes rank 0's RNG state
		}
		var rng []byte
		if err := errors.Join(resume.LoadStateDict("optim", opt), resume.LoadStateDict("sched", sched), resume.Local(from, "rng", &rng)); err != nil {
			return err
		}
		if err := pcg.UnmarshalBinary(rng); err != nil {
			return fmt.Errorf("checkpoint %s: rank %d rng: %w", resume.Dir, from, err)
		}
	}
	if rank == 0 {
		peak := sched.StateDict().Scalars["base_lr.0"] // a resumed job keeps its first world size's
		fmt.Fprintf(out, "%s on %d rank(s), batch %d per rank, peak lr %.4f, %d steps\n", c.model, world, c.batch, peak, tmax)
		for _, sk := range skipped {
			fmt.Fprintf(out, "checkpoint skipped: %v\n", sk)
		}
		if resume != nil {
			fmt.Fprintf(out, "resumed at step %d from %s\n", step, resume.Dir)
		}
		if resized {
			fmt.Fprintf(out, "saved by %d ranks: the rest of epoch %d is dealt among %d (%d steps in all now)\n",
				pos.Splits[len(pos.Splits)-2].World, pos.Epoch+1, world, tmax)
		}
	}
	save := func(step int) error {
		s := &checkpoint.Snapshot{Step: int64(step), Meta: map[string]any{"job": jobOf(c), "tmax": tmax}}
		if rank == 0 { // replicated: one copy is enough
			s.AddModule("model", model, nil)
			s.AddStateDict("optim", opt.StateDict())
			s.AddStateDict("sched", sched.StateDict())
		}
		rngState, err := pcg.MarshalBinary()
		if err != nil {
			return err
		}
		s.Local = map[string]any{"data": pos, "rng": rngState}
		g := checkpoint.NewGroup(rank, world, func(ctx context.Context) error { return pg.Barrier(ctx).Wait() })
		_, err = checkpoint.Save(ctx, c.ckptDir, g, s, checkpoint.Options{Keep: c.ckptKeep})
		return err
	}
	var stepTimes []time.Duration // this epoch's, for the median
	for pos.Epoch < c.epochs {
		epoch := pos.Epoch
		share, err := pos.Share(trainSet.Len(), c.seed, rank)
		if err != nil {
			return err
		}
		order := share[min(pos.Splits[len(pos.Splits)-1].Consumed, len(share)):]
		if len(order) == 0 {
			pos = data.StartOf(epoch+1, world)
			continue
		}
		// After every step: the position, a checkpoint every -checkpoint-every
		// steps, and a stop when a signal came (with a checkpoint).
		afterStep := func(idx []int) error {
			step++
			pos.Advance(len(idx), len(share))
			due := c.ckptDir != "" && (step%c.ckptEvery == 0 || step == tmax)
			return c.stop.AfterStep(ctx, pg, step, c.ckptDir, due, func() error { return save(step) })
		}
		start := time.Now()
		stepTimes = stepTimes[:0]
		seen := func(s obs.Step) { stepTimes = append(stepTimes, s.Duration) }
		loss, err := trainEpoch(ctx, m, opt, sched, trainSet, order, c.batch, shape, watch{run: ob, epoch: epoch, step: step, seen: seen}, afterStep)
		if err != nil {
			return fmt.Errorf("epoch %d: %w", epoch+1, err)
		}
		secs := time.Since(start).Seconds()
		slices.Sort(stepTimes)
		fmt.Fprintf(out, "epoch %d: train loss %.4f, %.1f s (%.0f samples/s on this rank, median step %v)",
			epoch+1, loss, secs, float64(len(order))/secs, stepTimes[len(stepTimes)/2].Round(time.Microsecond))
		if world > 1 {
			fmt.Fprintf(out, ", %s", m.Stats().Communication())
		}
		fmt.Fprintln(out)
		m.ResetStats()
	}
	if rank == 0 {
		acc, err := recipe.Accuracy(model, test, shape)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "test accuracy: %.4f\n", acc)
		if c.save != "" {
			if err := checkpoint.SaveModel(c.save, model, nil, map[string]string{"format": "pt"}); err != nil {
				return err
			}
			fmt.Fprintf(out, "weights saved to %s\n", c.save)
		}
	}
	// No rank leaves (closing its links) while another still evaluates.
	if err := pg.Barrier(ctx).Wait(); err != nil {
		return fmt.Errorf("final barrier: %w", err)
	}
	return nil
}

// load returns the training set (its first -limit samples) and the test set.
func (c config) load(ctx context.Context) (trainSet, test *datasets.MNIST, err error) {
	if trainSet, test, err = datasets.LoadMNISTContext(ctx, c.dir); err != nil {
		return nil, nil, err
	}
	if c.limit > 0 && c.limit < trainSet.Len() {
		trainSet = subset(trainSet, c.limit)
	}
	// An empty set would train nothing or report an accuracy of NaN.
	switch {
	case trainSet.Len() == 0:
		return nil, nil, errors.New("the MNIST training set is empty (see -data / COHORT_MNIST_DIR): nothing to train on")
	case test.Len() == 0:
		return nil, nil, errors.New("the MNIST test set is empty (see -data / COHORT_MNIST_DIR): there would be no accuracy to report")
	}
	return trainSet, test, nil
}

// job is what a checkpoint must agree with to be resumed (the world size
// may change).
type job struct {
	Model  string  `json:"model"`
	Epochs int     `json:"epochs"`
	Batch  int     `json:"batch"`
	LR     float64 `json:"lr"`
	Seed   uint64  `json:"seed"`
	Limit  int     `json:"limit"`
}

func jobOf(c config) job {
	return job{Model: c.model, Epochs: c.epochs, Batch: c.batch, LR: c.lr, Seed: c.seed, Limit: c.limit}
}
