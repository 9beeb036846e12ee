package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"math/rand/v2"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"syscall"
	"time"

	"github.com/cohortml/cohort/data"
	"github.com/cohortml/cohort/ddp"
	"github.com/cohortml/cohort/distributed"
	"github.com/cohortml/cohort/distributed/rendezvous"
	"github.com/cohortml/cohort/internal/cli"
	"github.com/cohortml/cohort/internal/warmheap"
	"github.com/cohortml/cohort/launch"
	"github.com/cohortml/cohort/nn"
	"github.com/cohortml/cohort/obs/progress"
	"github.com/cohortml/cohort/recipe"
	"github.com/cohortml/cohort/tensor"
	"github.com/cohortml/cohort/tensor/gemmbench"
)

// The anchor workload is recipe.Classifier's (the PyTorch anchors'
// ddp_mlp_bench.py), model seed 0, under DDP with the default 25 MiB
// buckets (1 MiB first bucket). Timing: warm-up steps, a barrier, the
// timed steps, a barrier; samples/s = world·64·steps / rank 0's wall time.
const (
	trainBatch     = recipe.AnchorBatch
	trainModelSeed = 0
)

const benchTrainUsage = `usage: cohort bench train [flags]

Training throughput of an anchor workload: --world worker processes of
this executable are started through the launcher (as cohort run does),
each trains its replica with data parallelism, and rank 0 reports

    train: MODEL world N dtype D samples/s X first100 Y      (mlp, cnn)
    train: gpt world N dtype D tokens/s X first100 Y         (gpt)

with the step time and the share of time spent waiting for data; Y is
the rate of the first 100 timed steps (of all of them when fewer), where
a step slowed by fresh memory shows. Before it, rank 0's minor page
faults per timed step, and what --fit-heap chose: after the warm-up the
collector's goal is sized to the step where fresh pages are dear
(internal/warmheap), unless GOGC or GOMEMLIMIT is set, and the growth
the goal allows is touched once. --shard runs fit their heap in the
warm-up too.
COHORT_PAGE_FAULT_COST=9us charges every minor fault that long (busy
waiting after each step), to show on a machine with cheap faults what a
step costs where they are dear.

With --shard none|zero1|zero2|fsdp each rank instead trains the model
with AdamW and clipping at 1.0 on random batches (64 samples, or 32×64
tokens for gpt, per rank) under ddp (none) or a sharded wrapper, and the
report ends

    train: MODEL world N shard S samples/s X state-bytes/rank Y param-bytes/rank Z peak-rss-MiB R

after rank 0's time per step by phase (batch, forward, backward, clip,
step). The sharded wrappers keep their gradient and gather buffers for
the next step; COHORT_SHARD_FREE_BUFFERS=1 frees them after every step
(zero.Options.FreeBuffers, fsdp.Options.FreeBuffers), and
COHORT_FSDP_KEEP_AFTER_FORWARD=1 keeps fsdp's units gathered from forward
to backward (fsdp.Options.KeepAfterForward).

  mlp, cnn  the MLP or LeNet CNN on 60000 synthetic MNIST-shaped samples,
            batch 64 per rank, SGD, ddp (with the share of gradient
            communication hidden behind backward); 20 warm-up and 200
            timed steps by default.
  gpt       GPT-mini on the bytes of Opticks (gpt_mini.py's recipe: random
            windows, batch 32×64 tokens per rank, AdamW, clipping at 1.0;
            gradients averaged by one all-reduce after backward); 10
            warm-up and 100 timed steps by default. tokens/s =
            world·32·64·steps / rank 0's wall time.

By default the workers run as under cohort run: the transport dist picks
(shared memory on one host), Go's default GOMAXPROCS, and 1 GEMM thread
each (the anchor's one thread per rank). On 2 cores with 2 ranks,
--transport tcp --gomaxprocs 1 measured within a few percent of that,
and shared memory with --gomaxprocs 1 25-40 % slower.

flags:
`

// trainSpec is one benchmark configuration: the parent's flags, passed on
// to every worker.
type trainSpec struct {
	model      string
	world      int
	ddp        bool // wrap the model in ddp (required for world > 1)
	view       bool // ddp.Options.GradientAsBucketView
	transport  string
	threads    int // GEMM threads per rank (COHORT_NUM_THREADS)
	gomaxprocs int // each worker's GOMAXPROCS; 0: Go's default (every core), as under cohort run
	steps      int // 0: the model's default (withDefaults)
	warmup     int // -1: the model's default
	cpuprofile string
	shard      string // none, zero1, zero2 or fsdp: the sharded-training workload (shard.go); "": the anchor's
	dtype      string // fp32 or bf16 (recipe.ParseDType): the products' dtype, bf16 autocast
	fitHeap    bool   // size the collector's goal to the step after the warm-up (warmheap.Fit)
	// Set by the worker from its environment, not flags.
	keepGC    bool          // GOGC or GOMEMLIMIT is set: the collector is the user's
	faultCost time.Duration // COHORT_PAGE_FAULT_COST: charged per minor fault (warmheap.Tax)
}

// withDefaults fills in the anchor's step counts for s.model where the
// flags left them open: 20 warm-up + 200 timed steps for the MNIST models
// (ddp_mlp_bench.py), 10 + 100 for gpt (gpt_bench.py).
func (s trainSpec) withDefaults() trainSpec {
	steps, warmup := 200, 20
	if s.model == "gpt" {
		steps, warmup = 100, 10
	}
	if s.steps == 0 {
		s.steps = steps
	}
	if s.warmup == -1 {
		s.warmup = warmup
	}
	return s
}

func (s trainSpec) validate() error {
	var errs []error
	if s.model != "mlp" && s.model != "cnn" && s.model != "gpt" {
		errs = append(errs, fmt.Errorf("--model %q: want mlp, cnn or gpt", s.model))
	}
	if s.world < 1 || s.threads < 1 || s.steps < 1 || s.warmup < 0 || s.gomaxprocs < 0 {
		errs = append(errs, fmt.Errorf("--world %d, --threads %d, --steps %d, --warmup %d, --gomaxprocs %d: want world, threads and steps ≥ 1, warmup and gomaxprocs ≥ 0",
			s.world, s.threads, s.steps, s.warmup, s.gomaxprocs))
	}
	if !s.ddp && s.world > 1 {
		errs = append(errs, fmt.Errorf("--ddp=false with --world %d: several ranks need ddp to stay in step", s.world))
	}
	switch s.transport {
	case "auto", "tcp", "shm":
	default:
		errs = append(errs, fmt.Errorf("--transport %q: want auto, tcp or shm", s.transport))
	}
	if s.shard != "" {
		errs = append(errs, s.validateShard())
	}
	if dt, err := recipe.ParseDType(s.dtype); err != nil {
		errs = append(errs, fmt.Errorf("--dtype %q: want fp32 or bf16", s.dtype))
	} else if dt != tensor.Float32 && s.shard != "" {
		errs = append(errs, fmt.Errorf("--dtype %s with --shard %s: the sharded workload trains in fp32 only", s.dtype, s.shard))
	}
	return errors.Join(errs...)
}

// workerArgs are the flags that make a worker run s and write rank 0's
// result to result.
func (s trainSpec) workerArgs(result string) []string {
	return []string{"--model", s.model, "--world", strconv.Itoa(s.world),
		"--ddp=" + strconv.FormatBool(s.ddp), "--view=" + strconv.FormatBool(s.view),
		"--transport", s.transport, "--threads", strconv.Itoa(s.threads),
		"--gomaxprocs", strconv.Itoa(s.gomaxprocs), "--steps", strconv.Itoa(s.steps),
		"--warmup", strconv.Itoa(s.warmup), "--cpuprofile", s.cpuprofile,
		"--shard", s.shard, "--dtype", s.dtype, "--fit-heap=" + strconv.FormatBool(s.fitHeap), "--worker", "--result", result}
}

// Train runs `cohort bench train` with args; self is the command that
// runs it again ({executable, "bench", "train"}), which the workers are
// started as.
func Train(self, args []string) int {
	cmd, code := parseBenchTrain(args, os.Stderr)
	if code >= 0 {
		return code
	}
	s := cmd.spec
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if cmd.worker {
		if err := trainWorker(ctx, s, cmd.result); err != nil {
			fmt.Fprintf(os.Stderr, "cohort bench train: %v\n", err)
			return 1
		}
		return 0
	}
	stop() // the launcher forwards signals to the workers from here on
	r, err := spawnTrain(context.Background(), s, self, os.Environ(), os.Stderr)
	if err != nil {
		fmt.Fprintf(os.Stderr, "cohort bench train: %v\n", err)
		return 1
	}
	if s.shard != "" {
		err = printShardReport(os.Stdout, s, r, cmd.asJSON)
	} else if cmd.asJSON {
		err = printTrainJSON(os.Stdout, s, r)
	} else {
		printTrain(os.Stdout, s, r)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "cohort bench train: %v\n", err)
		return 1
	}
	return 0
}

// benchTrainCmd is `cohort bench train`'s command line.
type benchTrainCmd struct {
	spec   trainSpec
	worker bool   // run as one rank of the job
	asJSON bool   // report as one JSON object
	result string // worker: where rank 0 writes its result
}

// parseBenchTrain parses `cohort bench train`'s flags, with the model's
// default step counts filled in. code is the exit code when the command
// is done already (0 after --help, 2 for a usage error, reported to
// stderr), else −1.
func parseBenchTrain(args []string, stderr io.Writer) (cmd benchTrainCmd, code int) {
	s := &cmd.spec
	fs := cli.NewFlagSet("cohort bench train", benchTrainUsage, stderr)
	fs.StringVar(&s.model, "model", "mlp", "mlp, cnn or gpt")
	fs.IntVar(&s.world, "world", 1, "worker processes (ranks) on this machine")
	fs.BoolVar(&s.ddp, "ddp", true, "wrap the model in ddp; --ddp=false (world 1 only) measures the plain training loop")
	fs.BoolVar(&s.view, "view", true, "gradients as views into ddp's buckets (GradientAsBucketView; gpt: always)")
	fs.StringVar(&s.transport, "transport", "auto", "auto (shared memory on one host), tcp or shm")
	fs.IntVar(&s.threads, "threads", 1, "GEMM threads per rank (COHORT_NUM_THREADS); the anchor uses 1")
	fs.IntVar(&s.gomaxprocs, "gomaxprocs", 0, "GOMAXPROCS of each worker; 0: Go's default, every core (what cohort run's workers get)")
	fs.IntVar(&s.steps, "steps", 0, "timed steps (0: the anchor's, 200 for mlp and cnn, 100 for gpt)")
	fs.IntVar(&s.warmup, "warmup", -1, "untimed steps before timing (-1: the anchor's, 20 for mlp and cnn, 10 for gpt)")
	fs.StringVar(&s.cpuprofile, "cpuprofile", "", "write a CPU profile of the timed steps to this file (rank r > 0 appends .r)")
	fs.StringVar(&s.dtype, "dtype", "fp32", "fp32, or bf16: bfloat16 autocast (matrix products in bfloat16 with float32 accumulation, float32 master weights and gradients)")
	fs.StringVar(&s.shard, "shard", "", "none, zero1, zero2 or fsdp: train the sharded-training workload (AdamW, clipping) under ddp or a sharded wrapper")
	fs.BoolVar(&s.fitHeap, "fit-heap", true, "after the warm-up, size the collector's goal to the step where fresh pages are dear (see internal/warmheap), and touch the heap's growth once; GOGC or GOMEMLIMIT set: the goal is left alone")
	fs.BoolVar(&cmd.worker, "worker", false, "internal: run as one rank of the job")
	fs.BoolVar(&cmd.asJSON, "json", false, "print the result as one JSON object instead of text")
	fs.StringVar(&cmd.result, "result", "", "internal: where rank 0 writes its result")
	if status, ok := cli.Parse(fs, args); !ok {
		return cmd, status
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "cohort bench train: unexpected argument %q\n", fs.Arg(0))
		return cmd, 2
	}
	*s = s.withDefaults()
	if err := s.validate(); err != nil {
		fmt.Fprintf(stderr, "cohort bench train: %v\n", err)
		return cmd, 2
	}
	return cmd, -1
}

// spawnTrain runs s as s.world worker processes started through the
// launcher: self[0] with the arguments self[1:] followed by the worker
// flags, in the environment env. It returns rank 0's result. The workers'
// output goes to out, prefixed with their rank.
func spawnTrain(ctx context.Context, s trainSpec, self []string, env []string, out io.Writer) (trainResult, error) {
	var r trainResult
	err := spawn(ctx, launch.Config{NProcPerNode: s.world, Program: self[0], Args: self[1:], Env: env, Stdout: out, Stderr: out}, s.workerArgs, &r)
	return r, err
}

// spawn runs cfg's workers through the launcher, forwarding SIGINT and
// SIGTERM to them, with cfg.Args followed by workerArgs(file), and decodes
// into result the JSON that rank 0 writes to file.
func spawn(ctx context.Context, cfg launch.Config, workerArgs func(file string) []string, result any) error {
	dir, err := os.MkdirTemp("", "cohort-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	file := filepath.Join(dir, "result.json")
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	cfg.Args, cfg.Signals = append(slices.Clone(cfg.Args), workerArgs(file)...), sigs
	err = launch.Run(ctx, cfg)
	var we *launch.WorkerError
	if errors.As(err, &we) {
		return errors.New(we.Report())
	}
	if err != nil {
		return err
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return fmt.Errorf("rank 0 wrote no result: %w", err)
	}
	if err := json.Unmarshal(b, result); err != nil {
		return fmt.Errorf("rank 0's result: %w", err)
	}
	return nil
}

// printTrain reports a run; its last line is `train: MODEL world N dtype
// D samples/s X firstN Y`, or for gpt `train: gpt world N dtype D
// tokens/s X firstN Y`.
func printTrain(w io.Writer, s trainSpec, r trainResult) {
	if s.model == "gpt" {
		printTrainGPT(w, s, r)
		return
	}
	mode := "no ddp"
	if s.ddp {
		mode = fmt.Sprintf("ddp (transport %s, bucket views %v)", s.transport, s.view)
	}
	fmt.Fprintf(w, "train: model %s, world %d, %s, batch %d per rank, %d warm-up + %d timed steps, GOMAXPROCS %d, gemm %s\n",
		s.model, s.world, mode, trainBatch, s.warmup, s.steps, r.GOMAXPROCS, r.Gemm)
	ms := func(d time.Duration) string { return fmt.Sprintf("%.2f ms", d.Seconds()*1e3/float64(s.steps)) }
	fmt.Fprintf(w, "train: %d params, step %s, data %.1f%%, last loss %.4f, wall %.2f s\n",
		r.Params, ms(r.Wall), 100*r.Data.Seconds()/r.Wall.Seconds(), r.LastLoss, r.Wall.Seconds())
	if st := r.DDP; st != nil && s.world > 1 {
		fmt.Fprintf(w, "train: rank 0 per step: forward %s, backward %s, all-reduce %s (%.0f%% hidden behind backward), exposed %s\n",
			ms(st.Forward), ms(st.Backward), ms(st.Comm), 100*st.HiddenFraction(), ms(st.Exposed))
	}
	printHeap(w, s, r)
	fmt.Fprintf(w, "train: %s world %d dtype %s samples/s %.0f first%d %.0f\n", s.model, s.world, s.dtypeName(), float64(s.world*trainBatch*s.steps)/r.Wall.Seconds(),
		r.FirstSteps, r.firstRate(s.world*trainBatch))
}

// printHeap reports what the heap's fitting chose, when it ran, and the
// timed steps' page faults, with their tax when one was charged.
func printHeap(w io.Writer, s trainSpec, r trainResult) {
	if r.Heap != "" {
		fmt.Fprintf(w, "train: rank 0 %s\n", r.Heap)
	}
	fmt.Fprintf(w, "train: rank 0 minor page faults %.1f/step over the timed steps", float64(r.Faults)/float64(max(s.steps, 1)))
	if s.faultCost > 0 {
		fmt.Fprintf(w, ", charged %v each (COHORT_PAGE_FAULT_COST): %.0f ms in all", s.faultCost, r.TaxPaid.Seconds()*1e3)
	}
	fmt.Fprintln(w)
}

// printTrainJSON reports a run as one JSON object on one line, with the
// field names of the PyTorch anchor's records where they exist.
func printTrainJSON(w io.Writer, s trainSpec, r trainResult) error {
	if s.model == "gpt" {
		return printTrainGPTJSON(w, s, r)
	}
	mode := "noddp"
	if s.ddp {
		mode = "ddp"
	}
	rec := map[string]any{
		"bench": "ddp_train", "impl": "cohort", "model": s.model, "world": s.world, "mode": mode,
		"threads": s.threads, "gomaxprocs": r.GOMAXPROCS, "transport": s.transport, "bucket_view": s.view,
		"params": r.Params, "steps": s.steps, "warmup": s.warmup, "batch_per_rank": trainBatch, "dtype": s.dtypeName(),
		"wall_s": r.Wall.Seconds(), "step_ms": r.Wall.Seconds() * 1e3 / float64(s.steps),
		"samples_per_s": float64(s.world*trainBatch*s.steps) / r.Wall.Seconds(),
		"first_steps":   r.FirstSteps, "first_samples_per_s": r.firstRate(s.world * trainBatch), "heap": r.Heap,
		"data_frac": r.Data.Seconds() / r.Wall.Seconds(), "last_loss": r.LastLoss, "gemm": r.Gemm,
	}
	if st := r.DDP; st != nil {
		per := func(d time.Duration) float64 { return d.Seconds() * 1e3 / float64(max(st.Steps, 1)) }
		rec["forward_ms"], rec["backward_ms"] = per(st.Forward), per(st.Backward)
		rec["comm_ms"], rec["exposed_ms"], rec["hidden_frac"] = per(st.Comm), per(st.Exposed), st.HiddenFraction()
	}
	return writeRecord(w, rec)
}

// writeRecord writes rec as one line of JSON, the benchmarks' -json
// output.
func writeRecord(w io.Writer, rec map[string]any) error {
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}

// trainResult is rank 0's measurement.
type trainResult struct {
	Params     int
	Wall       time.Duration // the timed steps, between the two barriers
	Data       time.Duration // time spent waiting for the next batch
	LastLoss   float32
	DDP        *ddp.Stats    // over the timed steps; nil without ddp (and for gpt)
	AllReduce  time.Duration // gpt: time in the gradient all-reduce
	GOMAXPROCS int
	Gemm       string
	Shard      *shardResult  // --shard: rank 0's sharded-training measurement
	FirstSteps int           // timed steps in First: min(100, steps)
	First      time.Duration // the first FirstSteps timed steps
	Heap       string        // what warmheap.Fit measured and chose; "" when not run
	TaxPaid    time.Duration // waited by warmheap.Tax over the timed steps
	Faults     int64         // rank 0's minor page faults over the timed steps
}

// trainWorker is one rank: it joins the job described by the environment
// (a world of one without a launcher), trains and, on rank 0, writes the
// result to resultFile.
func trainWorker(ctx context.Context, s trainSpec, resultFile string) error {
	// The kernels read their configuration once, at first use: set it
	// before anything runs one.
	if err := os.Setenv("COHORT_NUM_THREADS", strconv.Itoa(s.threads)); err != nil {
		return err
	}
	s.keepGC = warmheap.UserCollector()
	if v := os.Getenv("COHORT_PAGE_FAULT_COST"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			return fmt.Errorf("COHORT_PAGE_FAULT_COST=%q: want a duration ≥ 0 such as 9us", v)
		}
		s.faultCost = d
	}
	if s.gomaxprocs > 0 {
		runtime.GOMAXPROCS(s.gomaxprocs)
	}
	gemm, err := gemmbench.Describe()
	if err != nil {
		return err
	}
	var pg distributed.ProcessGroup
	rank := 0
	if s.ddp {
		info, err := rendezvous.FromEnv(os.Getenv)
		if err != nil {
			return err
		}
		if info.WorldSize != s.world {
			return fmt.Errorf("the environment says world %d, --world %d", info.WorldSize, s.world)
		}
		if pg, err = distributed.InitFromInfo(ctx, info, distributed.Options{Transport: s.transport}); err != nil {
			return err
		}
		defer pg.Close()
		rank = pg.Rank()
	}
	profile := s.cpuprofile
	if profile != "" && rank > 0 {
		profile += "." + strconv.Itoa(rank)
	}
	run := trainRun
	if s.model == "gpt" {
		run = gptTrainRun
	}
	if s.shard != "" {
		run = shardWorkerRun
	}
	r, err := run(ctx, s, pg, profile)
	if err != nil {
		return fmt.Errorf("rank %d: %w", rank, err)
	}
	if rank != 0 {
		return nil
	}
	r.GOMAXPROCS, r.Gemm = runtime.GOMAXPROCS(0), gemm
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	return os.WriteFile(resultFile, b, 0o644)
}

// trainRun builds the workload for pg's rank (a world of one when pg is
// nil, in which case the model is not wrapped) and runs s.warmup untimed
// and s.steps timed training steps.
func trainRun(ctx context.Context, s trainSpec, pg distributed.ProcessGroup, cpuprofile string) (trainResult, error) {
	world, rank := 1, 0
	if pg != nil {
		world, rank = pg.Size(), pg.Rank()
	}
	c, err := recipe.NewClassifier(s.model, rand.New(rand.NewPCG(trainModelSeed, 0)))
	if err != nil {
		return trainResult{}, err
	}
	loader, err := recipe.SyntheticLoader(c.Shape, world, rank)
	if err != nil {
		return trainResult{}, err
	}
	res := trainResult{Params: nn.NumParameters(c.Model)}
	if err := s.autocast(c.Model, rank); err != nil {
		return res, err
	}
	// The step runs the model alone, or under ddp.
	run, params := recipe.Local(c.Model), nn.Module(c.Model)
	var m *ddp.Model
	if pg != nil {
		if m, err = ddp.Wrap(ctx, c.Model, pg, ddp.Options{GradientAsBucketView: s.view}); err != nil {
			return res, err
		}
		defer m.Close()
		run, params = m, m
	}
	opt, err := recipe.NewSGD(nn.Parameters(params), recipe.AnchorLR)
	if err != nil {
		return res, err
	}

	// Batches walks the epochs in turn; pull one batch at a time so that
	// the wait for it can be timed. A batch stays valid until the next
	// pull.
	next, stop := iter.Pull2(epochs(ctx, loader))
	defer stop()
	step := func() error {
		t := time.Now()
		b, err, ok := next()
		res.Data += time.Since(t)
		if !ok {
			return fmt.Errorf("loader ended")
		}
		if err != nil {
			return err
		}
		loss, err := recipe.ClassifierStep(ctx, run, opt, nil, recipe.Input(b, c.Shape, tensor.CPU), b.Labels, nil)
		if err != nil {
			return err
		}
		res.LastLoss = loss.Value.Item()
		return nil
	}
	reset := func() {
		res.Data = 0
		if m != nil {
			m.ResetStats()
		}
	}
	if res.Wall, err = timeSteps(ctx, s, pg, cpuprofile, benchProgress(pg, s.steps, trainBatch, "samples"), step, reset, &res); err != nil {
		return res, err
	}
	if m != nil {
		st := m.Stats()
		res.DDP = &st
	}
	return res, nil
}

// timeSteps runs s.warmup steps, fits the heap (--fit-heap), then reset
// and a barrier (none without pg), then s.steps timed steps under a CPU profile into
// cpuprofile ("" for none), each reported with the loss res.LastLoss
// holds, and a barrier; it returns the wall time of the timed steps and
// records in res the first steps' time, the heap's fitting and the page
// faults.
func timeSteps(ctx context.Context, s trainSpec, pg distributed.ProcessGroup, cpuprofile string, report func(step int, loss float64), step func() error, reset func(), res *trainResult) (time.Duration, error) {
	w := newWarm(s)
	for i := range s.warmup {
		if err := step(); err != nil {
			return 0, err
		}
		w.step(i)
	}
	res.Heap = w.fit(s)
	reset()
	if err := barrier(ctx, pg); err != nil {
		return 0, fmt.Errorf("barrier after warm-up: %w", err)
	}
	stopProfile, err := cpuProfile(cpuprofile)
	if err != nil {
		return 0, err
	}
	defer stopProfile()
	start := time.Now()
	w.timed()
	for i := range s.steps {
		if err := step(); err != nil {
			return 0, err
		}
		w.tax.Pay()
		res.first(i, start)
		report(i+1, float64(res.LastLoss))
	}
	if err := barrier(ctx, pg); err != nil {
		return 0, fmt.Errorf("barrier after the timed steps: %w", err)
	}
	wall := time.Since(start)
	w.done(res)
	return wall, nil
}

// epochs yields the loader's batches epoch after epoch, forever (until ctx
// ends or the consumer stops).
func epochs(ctx context.Context, l *data.Loader) iter.Seq2[*data.Batch, error] {
	return func(yield func(*data.Batch, error) bool) {
		for {
			n := 0
			for b, err := range l.Batches(ctx) {
				if !yield(b, err) || err != nil {
					return
				}
				n++
			}
			if n == 0 {
				yield(nil, fmt.Errorf("loader yields no batches"))
				return
			}
		}
	}
}

// benchProgress is rank 0's progress over the timed steps, on stderr (the
// report goes to stdout); nil elsewhere. Its update costs a clock read and
// a lock per step, and writes a line at most every 10 s off a terminal.
func benchProgress(pg distributed.ProcessGroup, steps, samplesPerStep int, unit string) func(step int, loss float64) {
	if pg != nil && pg.Rank() != 0 {
		return func(int, float64) {}
	}
	bar := progress.New(progress.Options{Total: steps, Out: os.Stderr, Unit: unit})
	start := time.Now()
	return func(done int, loss float64) { // done: steps finished, 1..steps
		bar.Update(progress.Status{Step: done - 1, Epoch: 1, Loss: loss,
			Throughput: float64(done*samplesPerStep) / time.Since(start).Seconds()})
		if done == steps {
			bar.Finish()
		}
	}
}

// dtypeName is the report's spelling of --dtype: fp32 or bf16.
func (s trainSpec) dtypeName() string {
	dt, _ := recipe.ParseDType(s.dtype)
	return recipe.DTypeName(dt)
}

// autocast puts m's products in --dtype for the whole run (recipe.Autocast);
// rank 0 says once, on stderr, when bf16 runs on the widening fallback.
func (s trainSpec) autocast(m nn.Module, rank int) error {
	dt, err := recipe.ParseDType(s.dtype)
	if err != nil {
		return err
	}
	_, note, err := recipe.Autocast(m, dt)
	if err != nil {
		return err
	}
	if note != "" && rank == 0 {
		fmt.Fprintln(os.Stderr, note)
	}
	return nil
}

// barrier waits for every rank of pg; a run of one process (nil pg) has
// nothing to wait for.
func barrier(ctx context.Context, pg distributed.ProcessGroup) error {
	if pg == nil {
		return nil
	}
	return pg.Barrier(ctx).Wait()
}
