// Command gpt trains GPT-mini, a byte-level GPT-2 style language model
// (834,304 parameters), on Isaac Newton's Opticks with the recipe of the
// PyTorch anchor (gpt_mini.py): AdamW (lr 3e-4, betas 0.9/0.95, eps 1e-8,
// weight decay 0.1 on every parameter), gradient clipping at norm 1.0,
// batches of 32 random 64-byte windows per data-parallel replica, constant
// lr. It prints the training loss as it goes and, as its last line,
//
//	val loss: X
//
// the mean cross-entropy over every non-overlapping window of the held-out
// last 10 % of the text. After 300 steps PyTorch reaches 2.4166 (seed 0;
// 2.411–2.417 across seeds).
//
// # Layouts
//
// The same program runs alone or as the ranks of a job, on any mix of data
// (-dp), pipeline (-pp) and tensor (-tp) parallelism, dp·pp·tp = the
// number of ranks (-dp defaults to ranks/(pp·tp)):
//
//	go run ./examples/gpt -steps 300
//	go run ./cmd/cohort run --nproc-per-node 2 ./examples/gpt -steps 300          # dp 2
//	go run ./cmd/cohort run --nproc-per-node 2 ./examples/gpt -pp 2 -steps 300    # 2 pipeline stages
//	go run ./cmd/cohort run --nproc-per-node 2 ./examples/gpt -tp 2 -steps 300    # heads split in 2
//	go run ./cmd/cohort run --nproc-per-node 4 ./examples/gpt -dp 2 -pp 2 -schedule zb -microbatches 8
//
// Pure data parallelism (pp = tp = 1) wraps the model with ddp, whose
// bucketed gradient all-reduce overlaps the backward pass. Any other
// layout goes through package layout: the model is cut into -pp pipeline
// stages run under -schedule (gpipe, 1f1b, interleaved with -virtual
// stages per rank, or zb), each split over -tp ranks, each -batch cut into
// -microbatches; -recompute recomputes activations in backward.
//
// Without pipeline or tensor parallelism, -microbatches N runs each
// replica's batch as N parts, forward and backward one after another, the
// gradients accumulating before the one update (gradient accumulation):
// the same step to float32 rounding, with a part's activations in memory
// at a time instead of the whole batch's.
//
// -batch is the number of sequences per data-parallel replica and step,
// whatever the pipeline and tensor sizes: -pp 2 on 2 ranks trains on the
// 32 windows a single process trains on, and follows its loss curve to
// float32 rounding. dp replicas train on dp·batch windows a step: all
// replicas draw from one identically seeded generator and replica r keeps
// its slice r of the draw, so dp replicas with -batch 32/dp see exactly
// the windows of one process with -batch 32:
//
//	go run ./cmd/cohort run --nproc-per-node 2 ./examples/gpt -batch 16
//
// # Saving and resuming
//
// -save FILE.safetensors writes the final weights with the anchor's
// PyTorch names (checkpoint.GPTNames), so gpt_mini.py loads them with
// load_state_dict(safetensors.torch.load_file(FILE)). With -checkpoint-dir
// DIR the training state (weights, AdamW's moments and step, the position
// in the window stream) is saved every -checkpoint-every steps, and a run
// started again with the same flags resumes from the newest complete
// checkpoint in DIR and ends exactly as an uninterrupted run would. The
// state is saved whole, by parameter name, whatever the layout: pipeline
// and tensor-parallel ranks gather their shards to full tensors, rank 0
// writes them, and on resume every rank reads the full state and keeps its
// own shards. So a checkpoint resumes under another -pp, -tp or schedule;
// -dp, -batch, -seed and the model must stay the same (they fix the data
// stream).
//
// # Watching
//
// Rank 0 shows a progress line (step, loss, throughput — counted in
// tokens — and ETA); COHORT_TRACE=DIR writes each rank's timeline of data,
// forward+backward and optimizer spans, COHORT_DASHBOARD=host:port serves
// a live page (package obs).
//
// # Data and initial weights
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
	"github.com/cohortml/cohort/device/cudatensor"
	"io"
	"log"
	"os"
	"slices"
	"strings"

	"github.com/cohortml/cohort/datasets"
	"github.com/cohortml/cohort/distributed"
	_ "github.com/cohortml/cohort/distributed/backend/all" // the native, MPI and NCCL backends
	"github.com/cohortml/cohort/distributed/rendezvous"
	"github.com/cohortml/cohort/models"
	"github.com/cohortml/cohort/obs"
	"github.com/cohortml/cohort/pipeline"
)

type config struct {
	steps     int
	batch     int    // sequences per data-parallel replica and step
	seed      uint64 // initialisation and data stream, the same on every rank
	evalEvery int    // steps between validations; 0: only at the end
	logEvery  int    // steps between training-loss lines
	data      string // the text; "" finds Opticks in the Go installation
	init      string // weights from gpt_bench.py --dump-init; "" draws them from seed
	device    string // where to train: "cpu" (or ""), "cuda", "cuda:N"
	dtype     string // the products' dtype: "fp32" (or "") or "bf16" (recipe.ParseDType)

	// The layout: dp × pp × tp ranks (0: dp = ranks/(pp·tp), pp = tp =
	// 1), and the pipeline's schedule ("": 1f1b), microbatches (0: 2·pp),
	// virtual stages and recomputation.
	dp, pp, tp   int
	microbatches int
	schedule     string
	virtual      int
	recompute    bool

	save      string // final weights, safetensors with PyTorch names; "" for none
	ckptDir   string // training-state checkpoints; "" for none
	ckptEvery int    // steps between checkpoints (and one at the end)
	ckptKeep  int    // checkpoints kept; 0 keeps all

	model models.GPTConfig // GPT-mini; tests use smaller ones
	// record, when set, sees this rank's loss of every step ("train") and
	// every validation ("val"); tests compare them with PyTorch's.
	record func(what string, step int, loss float64)
	// stopAfter, when set, ends the run with errStopped right after that
	// step (and its checkpoint), as a crash would: tests resume from it.
	stopAfter int
	// progress receives rank 0's progress line; nil turns it off.
	progress io.Writer
	// stop ends the run after a step when a signal came; nil never does.
	stop *distributed.Stopper
}

func main() {
	c := config{model: models.GPTMini(), progress: os.Stdout}
	flag.IntVar(&c.steps, "steps", 300, "training steps")
	flag.StringVar(&c.device, "device", "cpu", "where to train: cpu, cuda or cuda:N")
	flag.StringVar(&c.dtype, "dtype", "fp32", "fp32, or bf16: bfloat16 autocast (matrix products in bfloat16 with float32 accumulation; float32 weights, gradients and optimizer)")
	flag.IntVar(&c.batch, "batch", 32, "sequences of 64 bytes per data-parallel replica and step")
	flag.Uint64Var(&c.seed, "seed", 0, "seed of the initial weights and of the data stream (the same on every rank)")
	flag.IntVar(&c.evalEvery, "eval-every", 100, "validate every N steps (0: only at the end)")
	flag.IntVar(&c.logEvery, "log-every", 25, "print the training loss every N steps")
	flag.StringVar(&c.data, "data", "", "the training text (default: $OPTICKS, else $(go env GOROOT)/src/testdata/Isaac.Newton-Opticks.txt)")
	flag.StringVar(&c.init, "init", "", "initial weights written by gpt_bench.py --dump-init (raw float32 and FILE.json)")
	flag.IntVar(&c.dp, "dp", 0, "data-parallel replicas (default: ranks / (pp·tp))")
	flag.IntVar(&c.pp, "pp", 1, "pipeline stages (ranks per pipeline)")
	flag.IntVar(&c.tp, "tp", 1, "tensor-parallel ranks per stage")
	flag.IntVar(&c.microbatches, "microbatches", 0, "microbatches per step: the pipeline's (default 2·pp), or without one the batch run in that many parts whose gradients accumulate (default 1)")
	flag.StringVar(&c.schedule, "schedule", "1f1b", "pipeline schedule: gpipe, 1f1b, interleaved or zb")
	flag.IntVar(&c.virtual, "virtual", 0, "stages per pipeline rank for -schedule interleaved (default 2)")
	flag.BoolVar(&c.recompute, "recompute", false, "recompute each stage's activations in backward instead of keeping them")
	flag.StringVar(&c.save, "save", "", "write the final weights to this .safetensors file (PyTorch names)")
	flag.StringVar(&c.ckptDir, "checkpoint-dir", "", "save the training state in this directory and resume from its newest complete checkpoint")
	flag.IntVar(&c.ckptEvery, "checkpoint-every", 100, "steps between checkpoints (with -checkpoint-dir)")
	flag.IntVar(&c.ckptKeep, "checkpoint-keep", 2, "checkpoints to keep (0: all)")
	flag.Parse()
	set := map[string]bool{}
	flag.Visit(func(f *flag.Flag) { set[f.Name] = true })
	for _, w := range c.idleFlags(set) {
		fmt.Fprintf(os.Stderr, "gpt: warning: %s\n", w)
	}
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
		fmt.Fprintln(os.Stderr, prefix+"gpt:", err)
		os.Exit(rendezvous.Fail(ctx, err))
	}
}

// run joins the job (the launcher's world, or a world of one) and trains.
func run(ctx context.Context, c config, out io.Writer) error {
	if err := c.validate(); err != nil {
		return err
	}
	if _, err := cudatensor.Open(c.device); err != nil {
		return err // before any data is loaded
	}
	pg, err := distributed.InitFromEnv(ctx)
	if err != nil {
		return err
	}
	defer pg.Close()
	return train(ctx, c, pg, out)
}

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

func (c config) validate() error {
	if c.steps < 1 || c.batch < 1 || c.evalEvery < 0 || c.logEvery < 1 {
		return fmt.Errorf("-steps %d, -batch %d, -eval-every %d, -log-every %d: want steps, batch and log-every ≥ 1, eval-every ≥ 0",
			c.steps, c.batch, c.evalEvery, c.logEvery)
	}
	if c.dp < 0 || c.pp < 0 || c.tp < 0 || c.microbatches < 0 || c.virtual < 0 {
		return fmt.Errorf("-dp %d, -pp %d, -tp %d, -microbatches %d, -virtual %d: want sizes ≥ 1 (or 0: the default)",
			c.dp, c.pp, c.tp, c.microbatches, c.virtual)
	}
	if (c.ckptDir != "" && c.ckptEvery < 1) || c.ckptKeep < 0 {
		return fmt.Errorf("-checkpoint-every %d, -checkpoint-keep %d: want every ≥ 1 and keep ≥ 0", c.ckptEvery, c.ckptKeep)
	}
	return nil
}

// layout completes the layout for a world of ranks: pipeline and tensor
// sizes 1 when unset, the data-parallel size, the schedule and the number
// of microbatches.
func (c config) layout(world int) (config, error) {
	c.pp, c.tp = max(c.pp, 1), max(c.tp, 1)
	if c.schedule == "" {
		c.schedule = "1f1b"
	}
	if world%(c.pp*c.tp) != 0 {
		return c, fmt.Errorf("-pp %d × -tp %d does not divide the %d ranks", c.pp, c.tp, world)
	}
	if c.dp == 0 {
		c.dp = world / (c.pp * c.tp)
	}
	if c.dp*c.pp*c.tp != world {
		return c, fmt.Errorf("-dp %d × -pp %d × -tp %d = %d ranks, but the job has %d", c.dp, c.pp, c.tp, c.dp*c.pp*c.tp, world)
	}
	if c.microbatches == 0 {
		c.microbatches = 1
		if c.pp > 1 {
			c.microbatches = 2 * c.pp
		}
	}
	// Flags for a pipeline do nothing without one: the user should hear
	// it rather than find out (-dp 2 -tp 2 -schedule zb ran with pp 1).
	if !slices.Contains(pipeline.Names(), c.schedule) {
		return c, fmt.Errorf("-schedule %q: unknown (have %s)", c.schedule, strings.Join(pipeline.Names(), ", "))
	}
	if c.pp == 1 {
		switch {
		case c.schedule != "1f1b":
			return c, fmt.Errorf("-schedule %s needs pipeline stages (-pp 2 or more); this layout (dp %d × tp %d) has none", c.schedule, c.dp, c.tp)
		case c.virtual != 0:
			return c, fmt.Errorf("-virtual %d needs pipeline stages (-pp 2 or more and -schedule interleaved); this layout (dp %d × tp %d) has none", c.virtual, c.dp, c.tp)
		}
	}
	if c.pp == 1 && c.tp == 1 { // package layout checks the other layouts
		if c.batch%c.microbatches != 0 {
			return c, fmt.Errorf("-microbatches %d do not divide a batch of %d sequences per data-parallel replica", c.microbatches, c.batch)
		}
		if c.recompute {
			return c, fmt.Errorf("-recompute needs pipeline or tensor parallelism (-pp or -tp 2 or more); this layout has neither")
		}
	}
	return c, nil
}

// loadCorpus reads the text at path, or when path is "" the Opticks that
// datasets.OpticksPath finds ($OPTICKS, else the Go installation's), split
// 90/10 into windows of context bytes.
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
