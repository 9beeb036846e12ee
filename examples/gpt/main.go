// Command gpt trains GPT-mini, a byte-level GPT-2 style language model
// (834,304 parameters), on Isaac Newton's Opticks with the recipe of the
// PyTorch anchor (gpt_mini.py, package recipe): AdamW (lr 3e-4, betas
// 0.9/0.95, eps 1e-8, weight decay 0.1 on every parameter), gradient
// clipping at norm 1.0, batches of 32 random 64-byte windows per
// data-parallel replica, constant lr. It prints the training loss as it
// goes and, as its last line, "val loss: X": the mean cross-entropy over
// every window of the held-out last 10 % of the text. After 300 steps
// PyTorch reaches 2.4166 (seed 0; 2.411–2.417 across seeds).
//
//	go run ./examples/gpt -steps 300
//	go run ./cmd/cohort run --nproc-per-node 2 ./examples/gpt -steps 300          # dp 2
//	go run ./cmd/cohort run --nproc-per-node 2 ./examples/gpt -pp 2 -steps 300    # 2 pipeline stages
//	go run ./cmd/cohort run --nproc-per-node 2 ./examples/gpt -tp 2 -steps 300    # heads split in 2
//	go run ./cmd/cohort run --nproc-per-node 4 ./examples/gpt -dp 2 -pp 2 -schedule zb -microbatches 8
//
// # Layouts
//
// Any mix of data (-dp), pipeline (-pp) and tensor (-tp) parallelism,
// dp·pp·tp = the ranks (recipe/parallel): pure data parallelism wraps the
// model with ddp; any other layout goes through package layout, the model
// cut into -pp stages run under -schedule (gpipe, 1f1b, interleaved with
// -virtual stages per rank, or zb), each split over -tp ranks, each
// -batch cut into -microbatches; -recompute recomputes activations in
// backward. Without pipeline or tensor parallelism, -microbatches N runs
// the batch in N parts whose gradients accumulate before the one update.
//
// -layers, -width, -heads and -context size the model (GPT-mini's by
// default; -init must match).
//
// -batch is the number of sequences per data-parallel replica and step,
// whatever the pipeline and tensor sizes. All replicas draw from one
// identically seeded generator and replica r keeps slice r of the draw,
// so dp replicas with -batch 32/dp see exactly the windows of one process
// with -batch 32.
//
// # Saving, resuming, watching, initial weights
//
// -save FILE.safetensors writes the final weights with the anchor's
// PyTorch names (checkpoint.GPTNames). With -checkpoint-dir DIR the
// training state (weights, AdamW's moments and step, the data position)
// is saved whole, by parameter name, every -checkpoint-every steps; a run
// started again with the same flags resumes from the newest complete
// checkpoint and ends exactly as an uninterrupted run would, under any
// -pp, -tp or schedule (-dp, -batch, -seed and the model fix the data
// stream and must stay). Rank 0 shows a progress line; COHORT_TRACE=DIR
// and COHORT_DASHBOARD=host:port trace and serve the run (package obs).
// The text is $(go env GOROOT)/src/testdata/Isaac.Newton-Opticks.txt, or
// -data, or $OPTICKS. -init FILE starts from the weights of the anchor's
// `gpt_bench.py --dump-init FILE`: with the same -seed the run follows
// PyTorch's loss curve step by step.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/cohortml/cohort/device/cudatensor"
	"github.com/cohortml/cohort/distributed"
	_ "github.com/cohortml/cohort/distributed/backend/all" // the native, MPI and NCCL backends
	"github.com/cohortml/cohort/layout"
	"github.com/cohortml/cohort/models"
	"github.com/cohortml/cohort/obs"
	"github.com/cohortml/cohort/pipeline"
	"github.com/cohortml/cohort/recipe"
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
	// The model, byte-level (vocab 256): -layers, -width, -heads, -context.
	model models.GPTConfig

	// The layout: dp × pp × tp ranks (0: dp = ranks/(pp·tp)), the
	// pipeline's schedule, microbatches (0: 2·pp), virtual stages.
	dp, pp, tp, microbatches, virtual int
	schedule                          string
	recompute                         bool

	save      string // final weights, safetensors with PyTorch names; "" for none
	ckptDir   string // training-state checkpoints; "" for none
	ckptEvery int    // steps between checkpoints (and one at the end)
	ckptKeep  int    // checkpoints kept; 0 keeps all

	getenv func(string) string  // the environment obs reads (COHORT_PROGRESS, COHORT_TRACE, …); nil: none
	stop   *distributed.Stopper // ends the run after a step when a signal came; nil never does
}

func main() {
	c := config{model: models.GPTMini(), getenv: os.Getenv}
	flag.IntVar(&c.steps, "steps", 300, "training steps")
	flag.StringVar(&c.device, "device", "cpu", "where to train: cpu, cuda or cuda:N")
	flag.StringVar(&c.dtype, "dtype", "fp32", "fp32, or bf16: bfloat16 autocast (matrix products in bfloat16 with float32 accumulation; float32 weights, gradients and optimizer)")
	flag.IntVar(&c.batch, "batch", 32, "sequences (of -context bytes) per data-parallel replica and step")
	flag.IntVar(&c.model.NLayer, "layers", c.model.NLayer, "transformer blocks")
	flag.IntVar(&c.model.D, "width", c.model.D, "model width (a multiple of -heads)")
	flag.IntVar(&c.model.NHead, "heads", c.model.NHead, "attention heads per block")
	flag.IntVar(&c.model.Ctx, "context", c.model.Ctx, "bytes per training window: the longest sequence")
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
	warnCheckpointFlags := recipe.CheckpointFlags(flag.CommandLine, "gpt", &c.ckptDir, &c.ckptEvery, &c.ckptKeep)
	flag.Parse()
	warnCheckpointFlags(os.Stderr)
	// Under mpirun/srun, "[rank N] " starts the error line and the
	// library's log lines, as it does obs.Run.Out's.
	prefix := obs.FromEnv(os.Getenv, obs.Options{}).LinePrefix
	distributed.Main("gpt", prefix, func(ctx context.Context, stop *distributed.Stopper) error {
		c.stop = stop
		_, err := run(ctx, c, os.Stdout)
		return err
	})
}

// run joins the job (the launcher's world, or a world of one) and trains;
// it returns this rank's loss curve.
func run(ctx context.Context, c config, out io.Writer) (curve, error) {
	if err := c.validate(); err != nil {
		return curve{}, err
	}
	dev, err := cudatensor.Open(c.device)
	if err != nil {
		return curve{}, err // before any data is loaded
	}
	pg, err := distributed.InitFromEnvOn(ctx, dev) // nccl for a GPU, unless COHORT_BACKEND names one
	if err != nil {
		return curve{}, err
	}
	defer pg.Close()
	return train(ctx, c, pg, out)
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
	if m := c.model; m.NLayer < 1 || m.D < 1 || m.NHead < 1 || m.Ctx < 1 || m.D%m.NHead != 0 {
		return fmt.Errorf("-layers %d, -width %d, -heads %d, -context %d: want sizes ≥ 1, the width a multiple of the heads", m.NLayer, m.D, m.NHead, m.Ctx)
	}
	if (c.ckptDir != "" && c.ckptEvery < 1) || c.ckptKeep < 0 {
		return fmt.Errorf("-checkpoint-every %d, -checkpoint-keep %d: want every ≥ 1 and keep ≥ 0", c.ckptEvery, c.ckptKeep)
	}
	return nil
}

// layout completes the flags' layout for a world of ranks; package layout
// checks the rest of a staged one when it builds it.
func (c config) layout(world int) (layout.Config, error) {
	l := layout.Config{DP: c.dp, PP: max(c.pp, 1), TP: max(c.tp, 1), Microbatches: c.microbatches, Schedule: c.schedule,
		Virtual: c.virtual, Recompute: c.recompute, Batch: c.batch, SeqLen: c.model.Ctx}
	if l.Schedule == "" {
		l.Schedule = "1f1b"
	}
	if world%(l.PP*l.TP) != 0 {
		return l, fmt.Errorf("-pp %d × -tp %d does not divide the %d ranks", l.PP, l.TP, world)
	}
	if l.DP == 0 {
		l.DP = world / (l.PP * l.TP)
	}
	if n := l.DP * l.PP * l.TP; n != world {
		return l, fmt.Errorf("-dp %d × -pp %d × -tp %d = %d ranks, but the job has %d", l.DP, l.PP, l.TP, n, world)
	}
	if l.Microbatches == 0 && l.PP > 1 {
		l.Microbatches = 2 * l.PP
	} else if l.Microbatches == 0 {
		l.Microbatches = 1
	}
	// Flags for a pipeline do nothing without one: say so (-dp 2 -tp 2
	// -schedule zb once ran with pp 1).
	if !slices.Contains(pipeline.Names(), l.Schedule) {
		return l, fmt.Errorf("-schedule %q: unknown (have %s)", l.Schedule, strings.Join(pipeline.Names(), ", "))
	}
	switch {
	case l.PP == 1 && l.Schedule != "1f1b":
		return l, fmt.Errorf("-schedule %s needs pipeline stages (-pp 2 or more); this layout (dp %d × tp %d) has none", l.Schedule, l.DP, l.TP)
	case l.PP == 1 && l.Virtual != 0:
		return l, fmt.Errorf("-virtual %d needs pipeline stages (-pp 2 or more and -schedule interleaved); this layout (dp %d × tp %d) has none", l.Virtual, l.DP, l.TP)
	case l.PP == 1 && l.TP == 1 && l.Batch%l.Microbatches != 0:
		return l, fmt.Errorf("-microbatches %d do not divide a batch of %d sequences per data-parallel replica", l.Microbatches, l.Batch)
	case l.PP == 1 && l.TP == 1 && l.Recompute:
		return l, fmt.Errorf("-recompute needs pipeline or tensor parallelism (-pp or -tp 2 or more); this layout has neither")
	}
	return l, nil
}
