// Command gpt trains GPT-mini, a byte-level GPT-2 style language model
// (834,304 parameters), on Isaac Newton's Opticks with the recipe of the
// PyTorch anchor (gpt_mini.py): AdamW (lr 3e-4, betas 0.9/0.95, eps 1e-8,
// weight decay 0.1 on every parameter), gradient clipping at norm 1.0,
// batches of 32 random 64-byte windows per rank, constant lr. It prints
// the training loss as it goes and, as its last line,
//
//	val loss: X
//
// the mean cross-entropy over every non-overlapping window of the held-out
// last 10 % of the text. The same program runs alone or as the ranks of a
// data-parallel job:
//
//	go run ./examples/gpt -steps 300
//	go run ./cmd/cohort run --nproc-per-node 2 ./examples/gpt -steps 300
//
// Under a launcher every rank holds a full replica, takes its share of each
// step's random windows (all ranks draw from one identically seeded
// generator, so world W with batch B sees the batch a single process would
// draw with batch W·B), and the replicas' gradients are averaged before
// the update. After 300 steps PyTorch reaches a val loss of 2.4166 (seed 0;
// 2.411–2.417 across seeds).
//
// -batch is per rank, as in the anchor's DDP benchmark: W ranks train on
// W·batch windows a step, and so reach a lower loss in 300 steps. W ranks
// with -batch 32/W draw exactly the windows of one process with -batch 32
// and follow its run to float32 rounding:
//
//	go run ./cmd/cohort run --nproc-per-node 2 ./examples/gpt -batch 16
//
// The text ships with Go: $(go env GOROOT)/src/testdata/Isaac.Newton-Opticks.txt,
// or the file named by -data or $OPTICKS. With -init FILE the model starts
// from weights written by the anchor's `gpt_bench.py --dump-init FILE`,
// and with the same -seed the run follows PyTorch's loss curve step by
// step.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/signal"
	"syscall"
	"time"

	"cohort/datasets"
	"cohort/dist"
	"cohort/models"
)

type config struct {
	steps     int
	batch     int    // sequences per rank and step
	seed      uint64 // initialisation and data stream, the same on every rank
	evalEvery int    // steps between validations; 0: only at the end
	logEvery  int    // steps between training-loss lines
	data      string // the text; "" finds Opticks in the Go installation
	init      string // weights from gpt_bench.py --dump-init; "" draws them from seed

	model models.GPTConfig // GPT-mini; tests use smaller ones
	// record, when set, sees this rank's loss of every step ("train") and
	// every validation ("val"); tests compare them with PyTorch's.
	record func(what string, step int, loss float64)
}

func main() {
	c := config{model: models.GPTMini()}
	flag.IntVar(&c.steps, "steps", 300, "training steps")
	flag.IntVar(&c.batch, "batch", 32, "sequences of 64 bytes per rank and step")
	flag.Uint64Var(&c.seed, "seed", 0, "seed of the initial weights and of the data stream (the same on every rank)")
	flag.IntVar(&c.evalEvery, "eval-every", 100, "validate every N steps (0: only at the end)")
	flag.IntVar(&c.logEvery, "log-every", 25, "print the training loss every N steps")
	flag.StringVar(&c.data, "data", os.Getenv("OPTICKS"), "the training text (default $OPTICKS, else Opticks from `go env GOROOT`)")
	flag.StringVar(&c.init, "init", "", "initial weights written by gpt_bench.py --dump-init (raw float32 and FILE.json)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, c, os.Stdout)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "gpt:", err)
		os.Exit(1)
	}
}

// run joins the job (the launcher's world, or a world of one) and trains.
func run(ctx context.Context, c config, out io.Writer) error {
	if err := c.validate(); err != nil {
		return err
	}
	pg, err := dist.InitFromEnv(ctx)
	if err != nil {
		return err
	}
	defer pg.Close()
	return train(ctx, c, pg, out)
}

func (c config) validate() error {
	if c.steps < 1 || c.batch < 1 || c.evalEvery < 0 || c.logEvery < 1 {
		return fmt.Errorf("-steps %d, -batch %d, -eval-every %d, -log-every %d: want steps, batch and log-every ≥ 1, eval-every ≥ 0",
			c.steps, c.batch, c.evalEvery, c.logEvery)
	}
	return nil
}

// train runs the job on this rank of pg; rank 0 reports to out.
func train(ctx context.Context, c config, pg dist.ProcessGroup, out io.Writer) error {
	if err := c.validate(); err != nil {
		return err
	}
	corpus, err := loadCorpus(ctx, c.data, c.model.Ctx)
	if err != nil {
		return err
	}
	rank, world := pg.Rank(), pg.Size()
	record := c.record
	if record == nil {
		record = func(string, int, float64) {}
	}

	model, err := models.NewGPT(rand.New(rand.NewPCG(c.seed, 0)), c.model)
	if err != nil {
		return err
	}
	if c.init != "" {
		if err := loadInit(model, c.init); err != nil {
			return err
		}
	}
	// Every rank holds the whole model and takes part of the batch; this
	// is where pipeline or tensor parallelism would split it instead.
	tr, err := newReplicated(ctx, model, pg)
	if err != nil {
		return err
	}
	stream, err := corpus.NewWindowStream(c.seed, world, rank, c.batch)
	if err != nil {
		return err
	}
	if rank == 0 {
		fmt.Fprintf(out, "GPT %d layers, width %d, %d heads, %d parameters; %d rank(s) × batch %d × %d tokens; %d training, %d validation bytes\n",
			c.model.NLayer, c.model.D, c.model.NHead, tr.numParams(), world, c.batch, c.model.Ctx, len(corpus.Train), len(corpus.Val))
	}

	var x, y []int64
	var lossSum float64        // this rank's losses since the last log line
	var evalTime time.Duration // spent in intermediate validations
	start, logStart := time.Now(), time.Now()
	for step := 1; step <= c.steps; step++ {
		x, y = stream.Next(x, y)
		loss, err := tr.step(ctx, x, y)
		if err != nil {
			return fmt.Errorf("step %d: %w", step, err)
		}
		lossSum += float64(loss)
		record("train", step, float64(loss))
		if step%c.logEvery == 0 || step == c.steps {
			n := (step-1)%c.logEvery + 1
			// The mean over the ranks is the loss of the job's whole batch.
			mean, err := meanOverRanks(ctx, pg, []float64{float64(loss), lossSum / float64(n)})
			if err != nil {
				return fmt.Errorf("step %d: %w", step, err)
			}
			secs := time.Since(logStart).Seconds()
			if rank == 0 {
				fmt.Fprintf(out, "step %d: train loss %.4f, mean of steps %d–%d %.4f, %.0f tokens/s\n",
					step, mean[0], step-n+1, step, mean[1], float64(world*n*len(x))/secs)
			}
			lossSum, logStart = 0, time.Now()
		}
		if c.evalEvery > 0 && step%c.evalEvery == 0 && step < c.steps {
			t := time.Now()
			v, err := valLoss(ctx, tr, pg, corpus)
			if err != nil {
				return fmt.Errorf("step %d: validation: %w", step, err)
			}
			record("val", step, v)
			if rank == 0 {
				fmt.Fprintf(out, "step %d: val loss %.4f\n", step, v)
			}
			evalTime += time.Since(t)
			logStart = time.Now() // validation is not training throughput
		}
	}
	elapsed := time.Since(start) - evalTime
	v, err := valLoss(ctx, tr, pg, corpus)
	if err != nil {
		return fmt.Errorf("final validation: %w", err)
	}
	record("val", c.steps, v)
	// No rank leaves (closing its links) before every rank is done.
	if err := pg.Barrier(ctx).Wait(); err != nil {
		return fmt.Errorf("final barrier: %w", err)
	}
	if rank == 0 {
		fmt.Fprintf(out, "%d steps in %.1f s of training (%.0f tokens/s)\n", c.steps, elapsed.Seconds(),
			float64(world*c.steps*c.batch*c.model.Ctx)/elapsed.Seconds())
		fmt.Fprintf(out, "val loss: %.4f\n", v)
	}
	return nil
}

// loadCorpus reads the text at path, or Opticks from the Go installation
// when path is "", split 90/10 into windows of context bytes.
func loadCorpus(ctx context.Context, path string, context int) (*datasets.ByteCorpus, error) {
	if path == "" {
		p, err := datasets.OpticksPath(ctx)
		if err != nil {
			return nil, fmt.Errorf("%w (name a text with -data or $OPTICKS)", err)
		}
		path = p
	}
	return datasets.LoadByteCorpus(path, context)
}
