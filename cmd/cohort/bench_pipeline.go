package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"cohort/autograd"
	"cohort/dist"
	"cohort/dist/rendezvous"
	"cohort/launch"
	"cohort/models"
	"cohort/optim"
	"cohort/pipeline"
)

const benchPipelineUsage = `usage: cohort bench pipeline [flags]

Pipeline-parallel training throughput of GPT-mini (AdamW, clip 1.0,
batch --batch × 64 tokens per step): --stages worker processes, each
holding a contiguous part of the model, run --schedule over --microbatches
microbatches. The same binary runs the workers (a hidden --worker mode)
through the launcher, one GEMM thread each, first with one stage running
the whole model over the same microbatches (the baseline), then with
--stages. The last line is

  pipeline: schedule S stages P microbatches M tokens/s X speedup Y ideal Z

where speedup is tokens/s over the baseline's and ideal is the speedup the
schedule's bubble allows with equal stage costs (the simulator's, for
unit F, B and W costs). The line before reports the measured bubble,
1 − speedup/P.

`

// pipeSpec is one pipeline benchmark run.
type pipeSpec struct {
	schedule     string
	stages       int
	virtual      int
	microbatches int
	batch        int
	steps        int
	warmup       int
	threads      int
	transport    string
}

func (s pipeSpec) workerArgs(stages int, result string) []string {
	return []string{"--schedule", s.schedule, "--stages", strconv.Itoa(stages), "--virtual", strconv.Itoa(s.virtual),
		"--microbatches", strconv.Itoa(s.microbatches), "--batch", strconv.Itoa(s.batch),
		"--steps", strconv.Itoa(s.steps), "--warmup", strconv.Itoa(s.warmup),
		"--threads", strconv.Itoa(s.threads), "--transport", s.transport, "--worker", "--result", result}
}

// pipeResult is what rank 0 of a run reports.
type pipeResult struct {
	Seconds   float64 `json:"seconds"` // the timed steps
	TokensSec float64 `json:"tokens_per_s"`
	Loss      float64 `json:"loss"`
	// Bubble is 1 − Σ compute / Σ time in Step over the ranks, from the
	// executor's own timings of the timed steps (pipeline.Stats).
	Bubble float64 `json:"bubble"`
}

func benchPipeline(args []string) int {
	var s pipeSpec
	var worker bool
	var result string
	fs := flag.NewFlagSet("cohort bench pipeline", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), benchPipelineUsage)
		fs.PrintDefaults()
	}
	fs.StringVar(&s.schedule, "schedule", "1f1b", "gpipe, 1f1b, interleaved or zb (ZB-H1)")
	fs.IntVar(&s.stages, "stages", 2, "pipeline stages (worker processes)")
	fs.IntVar(&s.virtual, "virtual", 0, "stages per worker for interleaved (0: 2)")
	fs.IntVar(&s.microbatches, "microbatches", 8, "microbatches per step")
	fs.IntVar(&s.batch, "batch", 32, "sequences of 64 tokens per step")
	fs.IntVar(&s.steps, "steps", 30, "timed steps")
	fs.IntVar(&s.warmup, "warmup", 5, "untimed steps first")
	fs.IntVar(&s.threads, "threads", 1, "GEMM threads per worker (COHORT_NUM_THREADS)")
	fs.StringVar(&s.transport, "transport", "auto", "auto (shared memory on one host), tcp or shm")
	fs.BoolVar(&worker, "worker", false, "internal: run as one rank of the job")
	fs.StringVar(&result, "result", "", "internal: where rank 0 writes its result")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "cohort bench pipeline: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	sched, err := pipeline.NewSchedule(s.schedule, s.stages, s.virtual, s.microbatches)
	if err == nil {
		_, err = pipeline.MicrobatchSize(s.batch, s.microbatches)
	}
	if err == nil {
		_, err = pipeline.Uniform(models.GPTMini().NLayer, sched.NumStages())
	}
	if err == nil && (s.steps < 1 || s.warmup < 0 || s.threads < 1) {
		err = fmt.Errorf("--steps %d, --warmup %d, --threads %d: want steps and threads ≥ 1, warmup ≥ 0", s.steps, s.warmup, s.threads)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "cohort bench pipeline: %v\n", err)
		return 2
	}
	s.virtual = sched.Virtual
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if worker {
		if err := pipeWorker(ctx, s, sched, result); err != nil {
			fmt.Fprintf(os.Stderr, "cohort bench pipeline: %v\n", err)
			return 1
		}
		return 0
	}
	stop() // the launcher forwards signals to the workers from here on
	if err := runPipelineBench(os.Stdout, s, sched); err != nil {
		fmt.Fprintf(os.Stderr, "cohort bench pipeline: %v\n", err)
		return 1
	}
	return 0
}

func runPipelineBench(w io.Writer, s pipeSpec, sched *pipeline.Schedule) error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	base := s
	base.schedule, base.virtual = "1f1b", 1
	one, err := spawnPipe(base, 1, exe)
	if err != nil {
		return fmt.Errorf("baseline (1 stage): %w", err)
	}
	fmt.Fprintf(w, "baseline: 1 stage, %d microbatches of %d×64 tokens: tokens/s %.0f (%.3f s for %d steps)\n",
		s.microbatches, s.batch/s.microbatches, one.TokensSec, one.Seconds, s.steps)
	r, err := spawnPipe(s, s.stages, exe)
	if err != nil {
		return err
	}
	sim, err := pipeline.Simulate(sched, pipeline.UnitCosts())
	if err != nil {
		return err
	}
	var busy float64
	for _, b := range sim.Busy {
		busy += b
	}
	ideal := busy / sim.Makespan
	speedup := r.TokensSec / one.TokensSec
	fmt.Fprintf(w, "%s: %d stages: tokens/s %.0f (%.3f s for %d steps), loss %.4f\n", s.schedule, s.stages, r.TokensSec, r.Seconds, s.steps, r.Loss)
	fmt.Fprintf(w, "bubble: %.3f from speedup (1 − speedup/P), %.3f from the stages' compute time, %.3f simulated; speedup %.2f of ideal %.2f = %.2f\n",
		1-speedup/float64(s.stages), r.Bubble, sim.Bubble, speedup, ideal, speedup/ideal)
	fmt.Fprintf(w, "pipeline: schedule %s stages %d microbatches %d tokens/s %.0f speedup %.2f ideal %.2f\n",
		s.schedule, s.stages, s.microbatches, r.TokensSec, speedup, ideal)
	return nil
}

// spawnPipe runs s on stages worker processes through the launcher and
// returns rank 0's result.
func spawnPipe(s pipeSpec, stages int, exe string) (pipeResult, error) {
	dir, err := os.MkdirTemp("", "cohort-bench-pipeline-")
	if err != nil {
		return pipeResult{}, err
	}
	defer os.RemoveAll(dir)
	file := filepath.Join(dir, "result.json")
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	err = launch.Run(context.Background(), launch.Config{
		NProcPerNode: stages,
		Program:      exe,
		Args:         append([]string{"bench", "pipeline"}, s.workerArgs(stages, file)...),
		Env:          os.Environ(),
		Stdout:       os.Stderr,
		Stderr:       os.Stderr,
		Signals:      sigs,
	})
	var we *launch.WorkerError
	if errors.As(err, &we) {
		return pipeResult{}, errors.New(we.Report())
	}
	if err != nil {
		return pipeResult{}, err
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return pipeResult{}, fmt.Errorf("rank 0 wrote no result: %w", err)
	}
	var r pipeResult
	return r, json.Unmarshal(b, &r)
}

// pipeWorker is one rank: it trains its stages of GPT-mini on random
// tokens and, on rank 0, writes the timing of the timed steps.
func pipeWorker(ctx context.Context, s pipeSpec, sched *pipeline.Schedule, resultFile string) error {
	if err := os.Setenv("COHORT_NUM_THREADS", strconv.Itoa(s.threads)); err != nil {
		return err
	}
	info, err := rendezvous.FromEnv(os.Getenv)
	if err != nil {
		return err
	}
	if info.WorldSize != s.stages {
		return fmt.Errorf("the environment says world %d, --stages %d", info.WorldSize, s.stages)
	}
	pg, err := dist.InitFromInfo(ctx, info, dist.Options{Transport: s.transport})
	if err != nil {
		return err
	}
	defer pg.Close()
	rank := pg.Rank()
	g, err := models.NewGPT(rand.New(rand.NewPCG(0, 0)), models.GPTMini())
	if err != nil {
		return err
	}
	const T = 64
	split, err := pipeline.Uniform(g.Config.NLayer, sched.NumStages())
	if err != nil {
		return err
	}
	var stages []pipeline.Stage
	var gs []*models.GPTStage
	var params []*autograd.Var
	seen := map[*autograd.Var]bool{}
	for c := range sched.Virtual {
		st := c*sched.Stages + rank
		gst, err := g.NewStage(split[st], split[st+1], st == 0, st == sched.NumStages()-1)
		if err != nil {
			return err
		}
		stages, gs = append(stages, gst), append(gs, gst)
		for _, p := range gst.Parameters() {
			if !seen[p] {
				seen[p] = true
				params = append(params, p)
			}
		}
	}
	var tied []*autograd.Var
	if rank == sched.RankOf(0) || rank == sched.RankOf(sched.NumStages()-1) {
		tied = []*autograd.Var{g.Wte}
	}
	mb := s.batch / s.microbatches
	pl, err := pipeline.New(ctx, pg, sched, stages, pipeline.Options{Shape: []int{mb, T, g.Config.D}, Tied: tied, Split: split})
	if err != nil {
		return err
	}
	defer pl.Close()
	opt, err := optim.NewAdamW([]optim.Group{{Params: params, LR: 1e-3, WeightDecay: 0.1}}, optim.AdamDefaults())
	if err != nil {
		return err
	}
	rng := rand.New(rand.NewPCG(1, 2))
	idx, tgt := make([]int64, s.batch*T), make([]int64, s.batch*T)
	var start time.Time
	var loss float64
	var before pipeline.Stats
	for step := range s.warmup + s.steps {
		if step == s.warmup {
			if err := pg.Barrier(ctx).Wait(); err != nil {
				return err
			}
			start, before = time.Now(), pl.Stats()
		}
		for i := range idx {
			idx[i], tgt[i] = int64(rng.IntN(g.Config.Vocab)), int64(rng.IntN(g.Config.Vocab))
		}
		for _, st := range gs {
			if err := st.SetBatch(idx, tgt, s.batch, T, s.microbatches); err != nil {
				return err
			}
		}
		for _, p := range params {
			p.ZeroGrad()
		}
		if loss, err = pl.Step(ctx); err != nil {
			return err
		}
		if _, err := pl.ClipGradNorm(ctx, params, 1.0); err != nil {
			return err
		}
		opt.Step()
	}
	if err := pg.Barrier(ctx).Wait(); err != nil {
		return err
	}
	secs := time.Since(start).Seconds()
	after := pl.Stats()
	times := []float64{(after.Compute - before.Compute).Seconds(), (after.Wall - before.Wall).Seconds()}
	if err := pg.AllReduce(ctx, dist.F64(times), dist.Sum).Wait(); err != nil {
		return err
	}
	if rank != 0 {
		return nil
	}
	b, err := json.Marshal(pipeResult{Seconds: secs, TokensSec: float64(s.steps*s.batch*T) / secs, Loss: loss, Bubble: 1 - times[0]/times[1]})
	if err != nil {
		return err
	}
	return os.WriteFile(resultFile, b, 0o644)
}
