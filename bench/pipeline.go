package bench

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	rtrace "runtime/trace"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/cohortml/cohort/autograd"
	"github.com/cohortml/cohort/distributed"
	"github.com/cohortml/cohort/distributed/rendezvous"
	"github.com/cohortml/cohort/internal/cli"
	"github.com/cohortml/cohort/internal/warmheap"
	"github.com/cohortml/cohort/launch"
	"github.com/cohortml/cohort/models"
	"github.com/cohortml/cohort/obs/trace"
	"github.com/cohortml/cohort/optim"
	"github.com/cohortml/cohort/pipeline"
)

const benchPipelineUsage = `usage: cohort bench pipeline [flags]

Pipeline-parallel training throughput of GPT-mini (AdamW, clip 1.0,
batch --batch × 64 tokens per step): --stages worker processes, each
holding a contiguous part of the model, run --schedule over --microbatches
microbatches. The same binary runs the workers (a hidden --worker mode)
through the launcher, one GEMM thread each, first with one stage running
the whole model over the same microbatches (the baseline), then with
--stages. Each worker runs Go with GOMAXPROCS = --threads unless
--gomaxprocs says otherwise: a 1-thread rank, the baseline's included,
then does its compute, its garbage collection and its sends and receives
(which the executor runs on its own goroutine) on one OS thread, rather
than handing off between two threads time-sliced on the rank's CPU. The
last line is

  pipeline: schedule S stages P microbatches M tokens/s X speedup Y ideal Z

where speedup is tokens/s over the baseline's and ideal is the speedup the
schedule's bubble allows with equal stage costs (the simulator's, for
unit F, B and W costs). The lines before report the measured bubble,
1 − speedup/P; each rank's step broken down (compute by pass, waiting
for receives and sends, the step-end sync, time outside Step); and the
bubble the simulator gives for the measured per-rank pass costs beside
the one measured. --trace DIR writes each rank's per-action timeline of
the timed steps (cohort trace merge DIR puts them on one), and the
baseline's in DIR/baseline.

The measured bubble is given twice: over all stages (1 − Σ compute /
Σ time in Step), and of the busiest stage (1 − its compute / its time in
Step). Only the first counts the idle time of the cheaper stages that a
difference in compute forces on them whatever the schedule (the split of
the model, or one core of a shared machine running slower than another).

--schedule takes a comma-separated list (1f1b,zb): every round then runs
the baseline and each schedule in turn, and the bubbles of each schedule
after the first are compared with the first's round by round (the median
of the per-round ratios), so that both saw the same load.

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
	gomaxprocs   int // each worker's GOMAXPROCS (0: threads)
	transport    string
	trace        string
	profile      string // directory for CPU profiles and execution traces of the timed steps (and allocation profiles)
	rounds       int
	fitHeap      bool // fit each worker's heap in the warm-up (warmheap.Loop)
}

func (s pipeSpec) workerArgs(stages int, result string) []string {
	return []string{"--schedule", s.schedule, "--stages", strconv.Itoa(stages), "--virtual", strconv.Itoa(s.virtual),
		"--microbatches", strconv.Itoa(s.microbatches), "--batch", strconv.Itoa(s.batch),
		"--steps", strconv.Itoa(s.steps), "--warmup", strconv.Itoa(s.warmup),
		"--threads", strconv.Itoa(s.threads), "--gomaxprocs", strconv.Itoa(s.gomaxprocs), "--transport", s.transport, "--trace", s.trace, "--profile", s.profile, "--rounds", "1",
		"--fit-heap=" + strconv.FormatBool(s.fitHeap), "--worker", "--result", result}
}

// pipeResult is what rank 0 of a run reports.
type pipeResult struct {
	Seconds   float64 `json:"seconds"` // the timed steps
	TokensSec float64 `json:"tokens_per_s"`
	Loss      float64 `json:"loss"`
	// Bubble is 1 − Σ compute / Σ time in Step over the ranks, from the
	// executor's own timings of the timed steps (pipeline.Stats).
	Bubble float64 `json:"bubble"`
	// Busiest is the bubble of the stage that computes longest: 1 − its
	// compute / its time in Step. A schedule sets how long that stage
	// waits; a difference in the stages' compute (their split, or one
	// core running slower than the other) idles the others whatever the
	// schedule, and Bubble counts it, Busiest does not.
	Busiest float64 `json:"busiest"`
	// Ranks holds each rank's pipeline.Stats over the timed steps, and
	// Outside the time each rank spent per step outside Step (clipping,
	// the optimizer, the batch).
	Ranks   []pipeline.Stats `json:"ranks"`
	Outside []float64        `json:"outside"`
}

// Pipeline runs `cohort bench pipeline` with args; self is the command
// that runs it again ({executable, "bench", "pipeline"}), which the
// workers are started as.
func Pipeline(self, args []string) int {
	var s pipeSpec
	var worker bool
	var result string
	fs := cli.NewFlagSet("cohort bench pipeline", benchPipelineUsage, os.Stderr)
	fs.StringVar(&s.schedule, "schedule", "1f1b", "gpipe, 1f1b, interleaved or zb (ZB-H1), or several, comma-separated, run in turn each round")
	fs.IntVar(&s.stages, "stages", 2, "pipeline stages (worker processes)")
	fs.IntVar(&s.virtual, "virtual", 0, "stages per worker for interleaved (0: 2)")
	fs.IntVar(&s.microbatches, "microbatches", 8, "microbatches per step")
	fs.IntVar(&s.batch, "batch", 32, "sequences of 64 tokens per step")
	fs.IntVar(&s.steps, "steps", 30, "timed steps")
	fs.IntVar(&s.warmup, "warmup", 5, "untimed steps first")
	fs.BoolVar(&s.fitHeap, "fit-heap", true, "in the warm-up, fit each worker's collector goal to its step and touch the heap's growth once, so that the timed steps find their memory mapped (see internal/warmheap); GOGC or GOMEMLIMIT set: the goal is left alone")
	fs.IntVar(&s.rounds, "rounds", 1, "rounds of baseline then pipelined run, alternating; the medians are reported")
	fs.IntVar(&s.threads, "threads", 1, "GEMM threads per worker (COHORT_NUM_THREADS)")
	fs.IntVar(&s.gomaxprocs, "gomaxprocs", 0, "GOMAXPROCS of each worker; 0: --threads, so that a 1-thread rank, baseline included, runs Go (its collector too) on one thread")
	fs.StringVar(&s.transport, "transport", "auto", "auto (shared memory on one host), tcp or shm")
	fs.StringVar(&s.trace, "trace", "", "write each rank's per-action timeline of the pipelined run to this directory, in a subdirectory per schedule when there are several (merge with cohort trace merge)")
	fs.StringVar(&s.profile, "profile", "", "write each rank's CPU profile and Go execution trace of the timed steps, and its allocation profile (since the process began), to this directory (baseline.rankR.*, SCHEDULE.rankR.*; the last round's)")
	fs.BoolVar(&worker, "worker", false, "internal: run as one rank of the job")
	fs.StringVar(&result, "result", "", "internal: where rank 0 writes its result")
	if status, ok := cli.Parse(fs, args); !ok {
		return status
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "cohort bench pipeline: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	var scheds []*pipeline.Schedule
	var err error
	for name := range strings.SplitSeq(s.schedule, ",") {
		var sched *pipeline.Schedule
		sched, err = pipeline.NewSchedule(name, s.stages, s.virtual, s.microbatches)
		if err == nil {
			_, err = pipeline.Uniform(models.GPTMini().NLayer, sched.NumStages())
		}
		if err == nil && slices.ContainsFunc(scheds, func(o *pipeline.Schedule) bool { return o.Name == name }) {
			err = fmt.Errorf("--schedule %s: %s twice", s.schedule, name)
		}
		if err != nil {
			break
		}
		scheds = append(scheds, sched)
	}
	if err == nil {
		_, err = pipeline.MicrobatchSize(s.batch, s.microbatches)
	}
	if err == nil && worker && len(scheds) != 1 {
		err = fmt.Errorf("--schedule %s: a worker runs one schedule", s.schedule)
	}
	if err == nil && (s.steps < 1 || s.warmup < 0 || s.threads < 1 || s.rounds < 1 || s.gomaxprocs < 0) {
		err = fmt.Errorf("--steps %d, --warmup %d, --threads %d, --rounds %d, --gomaxprocs %d: want steps, threads and rounds ≥ 1, warmup and gomaxprocs ≥ 0", s.steps, s.warmup, s.threads, s.rounds, s.gomaxprocs)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "cohort bench pipeline: %v\n", err)
		return 2
	}
	if s.gomaxprocs == 0 {
		s.gomaxprocs = s.threads
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if worker {
		s.virtual = scheds[0].Virtual
		if err := pipeWorker(ctx, s, scheds[0], result); err != nil {
			fmt.Fprintf(os.Stderr, "cohort bench pipeline: %v\n", err)
			return 1
		}
		return 0
	}
	stop() // the launcher forwards signals to the workers from here on
	if err := runPipelineBench(os.Stdout, s, scheds, self); err != nil {
		fmt.Fprintf(os.Stderr, "cohort bench pipeline: %v\n", err)
		return 1
	}
	return 0
}

func runPipelineBench(w io.Writer, s pipeSpec, scheds []*pipeline.Schedule, self []string) error {
	base := s
	base.schedule, base.virtual, base.trace = "1f1b", 1, ""
	if s.trace != "" {
		base.trace = filepath.Join(s.trace, "baseline") // the passes alone (cohort plan profile's side-by-side factor)
	}
	specs := make([]pipeSpec, len(scheds))
	for j, sched := range scheds {
		specs[j] = s
		specs[j].schedule, specs[j].virtual = sched.Name, sched.Virtual
		if len(scheds) > 1 && s.trace != "" {
			specs[j].trace = filepath.Join(s.trace, sched.Name)
		}
	}
	if s.profile != "" {
		if err := os.MkdirAll(s.profile, 0o755); err != nil {
			return err
		}
		base.profile = filepath.Join(s.profile, "baseline")
		for j := range specs {
			specs[j].profile = filepath.Join(s.profile, specs[j].schedule)
		}
	}
	// Each round runs the baseline, then every schedule (in reverse
	// order every other round), so that load from other processes hits
	// them all alike; per schedule, the round with the median speedup is
	// reported.
	fmt.Fprintf(w, "GPT-mini, batch %d×64 tokens, %d GEMM thread(s) and GOMAXPROCS %d per worker, transport %s\n",
		s.batch, s.threads, s.gomaxprocs, s.transport)
	type round struct{ one, r pipeResult }
	rounds := make([][]round, len(scheds)) // [schedule][round]
	for i := range s.rounds {
		one, err := spawnPipe(base, 1, self)
		if err != nil {
			return fmt.Errorf("baseline (1 stage): %w", err)
		}
		fmt.Fprintf(w, "round %d: baseline: 1 stage, %d microbatches of %d×64 tokens: tokens/s %.0f (%.3f s for %d steps)\n",
			i+1, s.microbatches, s.batch/s.microbatches, one.TokensSec, one.Seconds, s.steps)
		for k := range specs {
			j := k
			if i%2 == 1 {
				j = len(specs) - 1 - k
			}
			r, err := spawnPipe(specs[j], s.stages, self)
			if err != nil {
				return fmt.Errorf("%s: %w", specs[j].schedule, err)
			}
			fmt.Fprintf(w, "round %d: %s: %d stages: tokens/s %.0f, speedup %.2f, bubble %.3f (busiest stage %.3f)\n",
				i+1, specs[j].schedule, s.stages, r.TokensSec, r.TokensSec/one.TokensSec, r.Bubble, r.Busiest)
			rounds[j] = append(rounds[j], round{one, r})
		}
	}
	// Bubbles against the first schedule's, round by round (the same
	// round's runs saw the same load).
	for j := 1; j < len(scheds); j++ {
		var all, busiest []float64
		for i := range rounds[j] {
			a, b := rounds[0][i].r, rounds[j][i].r
			all = append(all, b.Bubble/a.Bubble)
			busiest = append(busiest, b.Busiest/a.Busiest)
		}
		fmt.Fprintf(w, "bubble of %s over %s, median of %d rounds' ratios: %.2f over all stages, %.2f of the busiest stage\n",
			scheds[j].Name, scheds[0].Name, len(all), median(all), median(busiest))
	}
	var last []string
	for j, sched := range scheds {
		rs := slices.Clone(rounds[j])
		slices.SortFunc(rs, func(a, b round) int {
			return cmp.Compare(a.r.TokensSec/a.one.TokensSec, b.r.TokensSec/b.one.TokensSec)
		})
		one, r := rs[len(rs)/2].one, rs[len(rs)/2].r
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
		var bubbles, busiest []float64
		for _, x := range rounds[j] {
			bubbles, busiest = append(bubbles, x.r.Bubble), append(busiest, x.r.Busiest)
		}
		fmt.Fprintf(w, "median of %d rounds: baseline tokens/s %.0f; %s: %d stages: tokens/s %.0f (%.3f s for %d steps), loss %.4f\n",
			len(rs), one.TokensSec, sched.Name, s.stages, r.TokensSec, r.Seconds, s.steps, r.Loss)
		fmt.Fprintf(w, "bubble: %.3f from speedup (1 − speedup/P), %.3f from the stages' compute time, %.3f simulated; speedup %.2f of ideal %.2f = %.2f\n",
			1-speedup/float64(s.stages), r.Bubble, sim.Bubble, speedup, ideal, speedup/ideal)
		fmt.Fprintf(w, "bubble medians over the rounds: %.3f over all stages, %.3f of the busiest stage\n", median(bubbles), median(busiest))
		if len(r.Ranks) == s.stages {
			printBreakdown(w, sched, r)
		}
		if len(one.Ranks) == 1 && len(r.Ranks) == s.stages {
			// The stages' compute against the baseline's: what splitting
			// the model cost in compute alone, before any bubble.
			var sum time.Duration
			for _, st := range r.Ranks {
				sum += st.Compute / time.Duration(max(st.Steps, 1))
			}
			base := one.Ranks[0].Compute / time.Duration(max(one.Ranks[0].Steps, 1))
			fmt.Fprintf(w, "compute per step: baseline %.1f ms, the stages together %.1f ms (%.2f×)\n",
				base.Seconds()*1e3, sum.Seconds()*1e3, sum.Seconds()/base.Seconds())
		}
		last = append(last, fmt.Sprintf("pipeline: schedule %s stages %d microbatches %d tokens/s %.0f speedup %.2f ideal %.2f\n",
			sched.Name, s.stages, s.microbatches, r.TokensSec, speedup, ideal))
	}
	for _, l := range last {
		fmt.Fprint(w, l)
	}
	return nil
}

// median returns the median of xs (the upper one of an even count), or
// NaN for none.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

// spawnPipe runs s on stages worker processes through the launcher and
// returns rank 0's result.
func spawnPipe(s pipeSpec, stages int, self []string) (pipeResult, error) {
	var r pipeResult
	cfg := launch.Config{NProcPerNode: stages, Program: self[0], Args: self[1:], Env: os.Environ(), Stdout: os.Stderr, Stderr: os.Stderr}
	err := spawn(context.Background(), cfg, func(file string) []string { return s.workerArgs(stages, file) }, &r)
	return r, err
}

// pipeWorker is one rank: it trains its stages of GPT-mini on random
// tokens and, on rank 0, writes the timing of the timed steps.
func pipeWorker(ctx context.Context, s pipeSpec, sched *pipeline.Schedule, resultFile string) error {
	if err := os.Setenv("COHORT_NUM_THREADS", strconv.Itoa(s.threads)); err != nil {
		return err
	}
	runtime.GOMAXPROCS(s.gomaxprocs)
	info, err := rendezvous.FromEnv(os.Getenv)
	if err != nil {
		return err
	}
	if info.WorldSize != s.stages {
		return fmt.Errorf("the environment says world %d, --stages %d", info.WorldSize, s.stages)
	}
	pg, err := distributed.InitFromInfo(ctx, info, distributed.Options{Transport: s.transport})
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
	opts := pipeline.Options{Shape: []int{mb, T, g.Config.D}, Tied: tied, Split: split, SendsBuffered: distributed.SendsBuffered(pg)}
	var tr *trace.Tracer
	tracing := false
	if s.trace != "" {
		if tr, err = trace.Open(s.trace, rank); err != nil {
			return err
		}
		defer tr.Close()
		opts.Span = func(track, name string) func() {
			if !tracing {
				return func() {}
			}
			return tr.Begin(track, name).End
		}
	}
	pl, err := pipeline.New(ctx, pg, sched, stages, opts)
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
	var outside time.Duration
	stopProfile := func() {}
	var heap *warmheap.Loop
	if s.fitHeap {
		heap = warmheap.NewLoop(warmheap.Options{})
	}
	fitted := func(d warmheap.Decision, ok bool) {
		if ok {
			fmt.Fprintf(os.Stderr, "pipeline: rank %d %s\n", rank, d)
		}
	}
	for step := range s.warmup + s.steps {
		if step == s.warmup {
			fitted(heap.Finish())
			if err := pg.Barrier(ctx).Wait(); err != nil {
				return err
			}
			start, before, outside, tracing = time.Now(), pl.Stats(), 0, true
			if stopProfile, err = pipeProfile(s.profile, rank); err != nil {
				return err
			}
			defer stopProfile()
		}
		t0 := time.Now()
		var sp trace.Span
		if tracing {
			sp = tr.Begin(trace.Step, fmt.Sprintf("step %d", step))
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
		t1 := time.Now()
		if loss, err = pl.Step(ctx); err != nil {
			return err
		}
		t2 := time.Now()
		if _, err := pl.ClipGradNorm(ctx, params, 1.0); err != nil {
			return err
		}
		opt.Step()
		outside += t1.Sub(t0) + time.Since(t2)
		sp.End()
		if step < s.warmup {
			fitted(heap.Step())
		}
	}
	if err := pg.Barrier(ctx).Wait(); err != nil {
		return err
	}
	secs := time.Since(start).Seconds()
	stopProfile()
	// Every rank's timings, each in its own slot of one all-reduced
	// buffer.
	d := pl.Stats().Sub(before)
	row := []time.Duration{d.Wall, d.Compute, d.Forward, d.Backward, d.Input, d.Weight,
		time.Duration(d.NForward), time.Duration(d.NBackward), time.Duration(d.NInput), time.Duration(d.NWeight),
		d.RecvWait, d.SendWait, d.Sync, outside}
	all := make([]float64, len(row)*s.stages)
	for i, v := range row {
		all[rank*len(row)+i] = float64(v)
	}
	if err := pg.AllReduce(ctx, distributed.F64(all), distributed.Sum).Wait(); err != nil {
		return err
	}
	if rank != 0 {
		return nil
	}
	res := pipeResult{Seconds: secs, TokensSec: float64(s.steps*s.batch*T) / secs, Loss: loss}
	var compute, wall, most float64
	for r := range s.stages {
		v := func(i int) time.Duration { return time.Duration(all[r*len(row)+i]) }
		st := pipeline.Stats{Steps: s.steps, Wall: v(0), Compute: v(1), Forward: v(2), Backward: v(3), Input: v(4), Weight: v(5),
			NForward: int(v(6)), NBackward: int(v(7)), NInput: int(v(8)), NWeight: int(v(9)),
			RecvWait: v(10), SendWait: v(11), Sync: v(12)}
		res.Ranks = append(res.Ranks, st)
		res.Outside = append(res.Outside, v(13).Seconds()/float64(s.steps))
		compute += st.Compute.Seconds()
		wall += st.Wall.Seconds()
		if c := st.Compute.Seconds(); c > most && st.Wall > 0 {
			most, res.Busiest = c, 1-c/st.Wall.Seconds()
		}
	}
	res.Bubble = 1 - compute/wall
	b, err := json.Marshal(res)
	if err != nil {
		return err
	}
	return os.WriteFile(resultFile, b, 0o644)
}

// printBreakdown prints where each rank's step time went and the bubble
// the simulator predicts for the measured per-rank costs of the passes,
// against the bubble measured.
func printBreakdown(w io.Writer, sched *pipeline.Schedule, r pipeResult) {
	ms := func(d time.Duration, steps int) float64 { return d.Seconds() * 1e3 / float64(max(steps, 1)) }
	var c pipeline.Costs
	for rank, st := range r.Ranks {
		n := st.Steps
		fmt.Fprintf(w, "rank %d per step (ms): in Step %.1f = compute %.1f (F %.1f, B %.1f, I %.1f, W %.1f) + waiting for receives %.1f + sends %.1f + step-end sync %.1f + other %.1f; outside Step %.1f\n",
			rank, ms(st.Wall, n), ms(st.Compute, n), ms(st.Forward, n), ms(st.Backward, n), ms(st.Input, n), ms(st.Weight, n),
			ms(st.RecvWait, n), ms(st.SendWait, n), ms(st.Sync, n),
			ms(st.Wall-st.Compute-st.RecvWait-st.SendWait-st.Sync, n), r.Outside[rank]*1e3)
		c.Ranks = append(c.Ranks, st.Costs())
	}
	sim, err := pipeline.Simulate(sched, c)
	if err != nil {
		fmt.Fprintf(w, "simulating the measured costs: %v\n", err)
		return
	}
	var wall float64
	for _, st := range r.Ranks {
		wall = max(wall, st.Wall.Seconds()/float64(max(st.Steps, 1)))
	}
	fmt.Fprintf(w, "measured costs simulated: step %.1f ms, bubble %.3f; measured: step %.1f ms in Step, bubble %.3f\n",
		sim.Makespan*1e3, sim.Bubble, wall*1e3, r.Bubble)
}

// pipeProfile starts a CPU profile and a Go execution trace into
// prefix.rankR.cpu.pprof and prefix.rankR.exec.trace (nothing when prefix
// is empty) and returns the function that stops both and writes the
// allocation profile, prefix.rankR.allocs.pprof; calling it again does
// nothing.
func pipeProfile(prefix string, rank int) (stop func(), err error) {
	if prefix == "" {
		return func() {}, nil
	}
	name := func(ext string) string { return fmt.Sprintf("%s.rank%d.%s", prefix, rank, ext) }
	cpu, err := os.Create(name("cpu.pprof"))
	if err != nil {
		return nil, err
	}
	exec, err := os.Create(name("exec.trace"))
	if err != nil {
		return nil, errors.Join(err, cpu.Close())
	}
	if err := pprof.StartCPUProfile(cpu); err != nil {
		return nil, errors.Join(err, cpu.Close(), exec.Close())
	}
	if err := rtrace.Start(exec); err != nil {
		pprof.StopCPUProfile()
		return nil, errors.Join(err, cpu.Close(), exec.Close())
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			rtrace.Stop()
			pprof.StopCPUProfile()
			cpu.Close()
			exec.Close()
			// Allocations since the process began, warm-up included.
			if f, err := os.Create(name("allocs.pprof")); err == nil {
				pprof.Lookup("allocs").WriteTo(f, 0)
				f.Close()
			}
		})
	}, nil
}
