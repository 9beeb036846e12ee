package bench

// The worker side of `cohort bench train --shard none|zero1|zero2|fsdp`:
// one rank trains the MLP, the LeNet CNN or GPT-mini with AdamW and
// global-norm clipping under DDP (none) or a sharded wrapper, and reports
// samples/s and the per-rank memory of the training state. The flag
// plumbing (spawning the workers) lives in train.go; it calls
// shardTrainRun in each worker and printShardTrain with rank 0's result.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"runtime"
	"runtime/pprof"
	"syscall"
	"time"

	"github.com/cohortml/cohort/autograd"
	"github.com/cohortml/cohort/ddp"
	"github.com/cohortml/cohort/distributed"
	"github.com/cohortml/cohort/fsdp"
	"github.com/cohortml/cohort/internal/warmheap"
	"github.com/cohortml/cohort/models"
	"github.com/cohortml/cohort/nn"
	"github.com/cohortml/cohort/optim"
	"github.com/cohortml/cohort/recipe"
	"github.com/cohortml/cohort/tensor"
	"github.com/cohortml/cohort/zero"
)

// shardSpec is one sharded-training benchmark configuration.
type shardSpec struct {
	Model  string // mlp, cnn or gpt
	Shard  string // none (ddp), zero1, zero2 or fsdp
	Batch  int    // samples per rank and step (gpt: sequences of shardSeqLen tokens); 0: 64 (mlp, cnn) or 32 (gpt), zero_bench.py's
	Warmup int    // untimed steps
	Steps  int    // timed steps
	// CPUProfile, if set, is where this rank writes a CPU profile of the
	// timed steps.
	CPUProfile string
	// FitHeap fits the collector's goal to the step during the warm-up
	// (warmheap.Loop), so that the timed steps find their memory mapped.
	FitHeap bool
}

const (
	shardSeqLen  = 64 // GPT-mini's context
	shardMaxNorm = recipe.ClipNorm
)

func (s shardSpec) validate() error {
	var errs []error
	switch s.Model {
	case "mlp", "cnn", "gpt":
	default:
		errs = append(errs, fmt.Errorf("--model %q: want mlp, cnn or gpt", s.Model))
	}
	switch s.Shard {
	case "none", "zero1", "zero2", "fsdp":
	default:
		errs = append(errs, fmt.Errorf("--shard %q: want none, zero1, zero2 or fsdp", s.Shard))
	}
	if s.Batch < 0 || s.Warmup < 0 || s.Steps < 1 {
		errs = append(errs, fmt.Errorf("batch %d, warmup %d, steps %d: want batch, warmup ≥ 0 and steps ≥ 1", s.Batch, s.Warmup, s.Steps))
	}
	return errors.Join(errs...)
}

// validateShard checks the --shard flag of `cohort bench train`.
func (s trainSpec) validateShard() error {
	switch {
	case s.shard != "none" && s.shard != "zero1" && s.shard != "zero2" && s.shard != "fsdp":
		return fmt.Errorf("--shard %q: want none, zero1, zero2 or fsdp", s.shard)
	case !s.ddp:
		return fmt.Errorf("--shard %s with --ddp=false: the sharded workload always runs in a process group", s.shard)
	}
	return nil
}

// shardSpec is the sharded-training configuration of a `cohort bench
// train --shard` run.
func (s trainSpec) shardSpec() shardSpec {
	return shardSpec{Model: s.model, Shard: s.shard, Warmup: s.warmup, Steps: s.steps, FitHeap: s.fitHeap}
}

// shardWorkerRun is trainWorker's run function under --shard: it returns
// the measurement in trainResult.Shard (and the common fields).
func shardWorkerRun(ctx context.Context, s trainSpec, pg distributed.ProcessGroup, cpuprofile string) (trainResult, error) {
	spec := s.shardSpec()
	spec.CPUProfile = cpuprofile
	r, err := shardTrainRun(ctx, spec, pg)
	if err != nil {
		return trainResult{}, err
	}
	return trainResult{Params: r.Params, Wall: r.Wall, LastLoss: r.LastLoss, Shard: &r}, nil
}

// printShardReport writes the parent's report of a --shard run: the text
// of printShardTrain, or one JSON object (asJSON) whose fields follow
// zero_bench.py's records where they exist.
func printShardReport(w io.Writer, s trainSpec, r trainResult, asJSON bool) error {
	if r.Shard == nil {
		return errors.New("rank 0 reported no sharded-training result")
	}
	sr := *r.Shard
	if !asJSON {
		printShardTrain(w, s.shardSpec(), s.world, sr)
		return nil
	}
	rec := map[string]any{
		"bench": "shard_train", "impl": "cohort", "model": s.model, "world": s.world, "mode": s.shard,
		"threads": s.threads, "gomaxprocs": r.GOMAXPROCS, "transport": s.transport, "params": sr.Params,
		"steps": s.steps, "warmup": s.warmup, "batch_per_rank": s.shardSpec().batch(),
		"wall_s": sr.Wall.Seconds(), "cpu_s": sr.CPU.Seconds(), "step_ms": sr.Wall.Seconds() * 1e3 / float64(s.steps),
		"samples_per_s": sr.SamplesPerSec(), "last_loss": sr.LastLoss,
		"opt_state_bytes": sr.Memory.OptimizerBytes, "param_bytes": sr.Memory.ParamBytes,
		"grad_bytes": sr.Memory.GradBytes, "buffer_bytes": sr.Memory.BufferBytes, "peak_rss_mib": float64(sr.PeakRSSBytes) / (1 << 20),
		"allocs_per_step": sr.AllocsPerStep, "alloc_bytes_per_step": sr.AllocBytesPerStep, "gcs": sr.GCs,
	}
	return writeRecord(w, rec)
}

// shardResult is one rank's measurement.
type shardResult struct {
	Params       int
	Wall         time.Duration // the timed steps, between two barriers
	Samples      int           // samples trained by all ranks in the timed steps
	Memory       zero.Memory   // between steps, after the last one
	PeakRSSBytes int64         // of this process (0 where unknown)
	LastLoss     float32
	// CPU is the process's user+system CPU time over the timed steps: a
	// measure of the work done that contention on a shared machine
	// disturbs less than wall time (in a one-process group, all ranks').
	CPU time.Duration
	// AllocsPerStep and AllocBytesPerStep are this process's heap
	// allocations per timed step (the whole step: model, loss, wrapper),
	// GCs the collections over the timed steps.
	AllocsPerStep, AllocBytesPerStep float64
	GCs                              uint32
	// Phases is the mean time per timed step of each phase (phaseNames),
	// on this rank; waiting for the other ranks counts in the phase that
	// waits.
	Phases [numPhases]time.Duration
	// Heap is what fitting the heap in the warm-up chose (shardSpec.FitHeap;
	// "" when it did not run).
	Heap string
}

// The phases of a benchmark step: making the batch, forward with the
// loss, backward (with the gradient reductions), clipping, and the
// optimizer step with zeroing the gradients (with the parameter gathers
// of zero1/zero2).
const (
	phaseBatch = iota
	phaseForward
	phaseBackward
	phaseClip
	phaseStep
	numPhases
)

var phaseNames = [numPhases]string{"batch", "forward", "backward", "clip", "step"}

// phaseTimer times one step's phases.
type phaseTimer struct {
	last time.Time
	d    [numPhases]time.Duration
}

// mark ends phase p, which began at the last mark (or when t was made).
func (t *phaseTimer) mark(p int) {
	now := time.Now()
	t.d[p] = now.Sub(t.last)
	t.last = now
}

// phaseTimes sums phases over steps.
type phaseTimes struct {
	sum   [numPhases]time.Duration
	steps int
}

func (p *phaseTimes) add(t phaseTimer) {
	for i, d := range t.d {
		p.sum[i] += d
	}
	p.steps++
}

func (p *phaseTimes) perStep() (out [numPhases]time.Duration) {
	for i, d := range p.sum {
		out[i] = d / time.Duration(max(p.steps, 1))
	}
	return out
}

// SamplesPerSec is the group's training throughput.
func (r shardResult) SamplesPerSec() float64 { return float64(r.Samples) / r.Wall.Seconds() }

// printShardTrain writes the report; its last line is
//
//	train: MODEL world N shard S samples/s X state-bytes/rank Y param-bytes/rank Z peak-rss-MiB R
func printShardTrain(w io.Writer, s shardSpec, world int, r shardResult) {
	fmt.Fprintf(w, "train: %s, %d params, world %d, shard %s, batch %d per rank, %d warm-up + %d timed steps, wall %.2f s, cpu %.2f s, last loss %.4f, gradient bytes/rank %d, reused buffer bytes/rank %d\n",
		s.Model, r.Params, world, s.Shard, s.batch(), s.Warmup, s.Steps, r.Wall.Seconds(), r.CPU.Seconds(), r.LastLoss, r.Memory.GradBytes, r.Memory.BufferBytes)
	fmt.Fprintf(w, "train: rank 0 heap allocations per step %.0f (%.1f MiB), %d GCs\n", r.AllocsPerStep, r.AllocBytesPerStep/(1<<20), r.GCs)
	if r.Heap != "" {
		fmt.Fprintf(w, "train: rank 0 %s\n", r.Heap)
	}
	fmt.Fprintf(w, "train: rank 0 per step (ms):")
	for i, d := range r.Phases {
		fmt.Fprintf(w, " %s %.2f", phaseNames[i], d.Seconds()*1e3)
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "train: %s world %d shard %s samples/s %.1f state-bytes/rank %d param-bytes/rank %d peak-rss-MiB %.1f\n",
		s.Model, world, s.Shard, r.SamplesPerSec(), r.Memory.OptimizerBytes, r.Memory.ParamBytes, float64(r.PeakRSSBytes)/(1<<20))
}

func (s shardSpec) batch() int {
	switch {
	case s.Batch > 0:
		return s.Batch
	case s.Model == "gpt":
		return 32
	}
	return 64
}

// shardAdamW builds AdamW over ps (full parameters or a shard).
func shardAdamW(ps []nn.NamedParameter) (optim.Optimizer, error) {
	return recipe.NewAdamW(zero.Vars(ps))
}

// shardBatch is one step's data on one rank: the plain forward pass, the
// same pass through fsdp units, and the loss of the output.
type shardBatch struct {
	plain func() *autograd.Var
	units func(*fsdp.Units) *autograd.Var
	loss  func(*autograd.Var) *autograd.Var
}

// shardWorkload builds the model (seed 0, the same on every rank) and a
// generator of random batches for rank (deterministic in rank and step).
func shardWorkload(s shardSpec, rank int) (nn.Module, []nn.Module, func(step int) shardBatch, error) {
	rng := rand.New(rand.NewPCG(0, 0))
	B := s.batch()
	if s.Model == "gpt" {
		g, err := models.NewGPT(rng, models.GPTMini())
		if err != nil {
			return nil, nil, nil, err
		}
		var units []nn.Module
		for _, b := range g.Blocks {
			units = append(units, b)
		}
		return g, units, func(step int) shardBatch {
			r := rand.New(rand.NewPCG(uint64(step), uint64(rank)))
			var idx, tgt []int64
			for range B {
				row := make([]int64, shardSeqLen+1)
				for i := range row {
					row[i] = int64(r.IntN(256))
				}
				idx, tgt = append(idx, row[:shardSeqLen]...), append(tgt, row[1:]...)
			}
			return shardBatch{
				plain: func() *autograd.Var { return g.Forward(idx, B, shardSeqLen) },
				units: func(u *fsdp.Units) *autograd.Var { return g.ForwardThrough(idx, B, shardSeqLen, u.Run) },
				loss:  func(out *autograd.Var) *autograd.Var { return g.Loss(out, tgt) },
			}
		}, nil
	}
	c, err := recipe.NewClassifier(s.Model, rng)
	if err != nil {
		return nil, nil, nil, err
	}
	shape, seq := c.Shape, c.Model
	units, fwd := fsdp.SequentialUnits(seq)
	return seq, units, func(step int) shardBatch {
		r := rand.New(rand.NewPCG(uint64(step), uint64(rank)))
		x := tensor.New(append([]int{B}, shape...)...)
		for i := range x.Data() {
			x.Data()[i] = float32(r.NormFloat64())
		}
		y := make([]int64, B)
		for i := range y {
			y[i] = int64(r.IntN(10))
		}
		xv := autograd.NewVar(x, false)
		return shardBatch{
			plain: func() *autograd.Var { return seq.Forward(xv) },
			units: fwd(xv),
			loss:  func(out *autograd.Var) *autograd.Var { return nn.CrossEntropy(out, y) },
		}
	}, nil
}

// shardTrainRun is one rank of the benchmark over pg (every rank calls it
// with the same spec): s.Warmup untimed and s.Steps timed steps of
// forward, backward, clipping and AdamW, under s.Shard.
func shardTrainRun(ctx context.Context, s shardSpec, pg distributed.ProcessGroup) (shardResult, error) {
	if err := s.validate(); err != nil {
		return shardResult{}, err
	}
	if pg == nil {
		return shardResult{}, errors.New("shard benchmark: nil process group")
	}
	mod, units, batch, err := shardWorkload(s, pg.Rank())
	if err != nil {
		return shardResult{}, err
	}
	res := shardResult{Params: nn.NumParameters(mod)}
	phases := &phaseTimes{}
	// step runs one training step and returns its loss; memory reports
	// the state between steps.
	var step func(i int) (*autograd.Var, error)
	var memory func() zero.Memory
	switch s.Shard {
	case "none":
		m, err := ddp.WrapModule(ctx, mod, pg, ddp.Options{GradientAsBucketView: true})
		if err != nil {
			return res, err
		}
		defer m.Close()
		opt, err := shardAdamW(mod.NamedParameters())
		if err != nil {
			return res, err
		}
		call := func(b shardBatch) (*autograd.Var, error) { return m.Call(ctx, b.plain) }
		step = shardStep(ctx, replicated{m, mod, opt}, call, batch, phases)
		memory = func() zero.Memory {
			var mem zero.Memory
			for _, p := range mod.NamedParameters() {
				mem.ParamBytes += 4 * int64(p.Param.Value.Len())
				mem.GradBytes += 4 * int64(p.Param.Value.Len())
			}
			mem.OptimizerBytes = zero.OptimizerBytes(opt)
			return mem
		}
	case "zero1", "zero2":
		stage := zero.Stage1
		if s.Shard == "zero2" {
			stage = zero.Stage2
		}
		m, err := zero.Wrap(ctx, mod, pg, zero.Options{Stage: stage, Optimizer: shardAdamW, FreeBuffers: freeBuffers()})
		if err != nil {
			return res, err
		}
		defer m.Close()
		step = shardStep(ctx, m, func(b shardBatch) (*autograd.Var, error) { return m.Call(ctx, b.plain) }, batch, phases)
		memory = m.Memory
	case "fsdp":
		m, err := fsdp.Wrap(ctx, mod, units, pg, fsdp.Options{Optimizer: shardAdamW, FreeBuffers: freeBuffers(), KeepAfterForward: keepAfterForward()})
		if err != nil {
			return res, err
		}
		defer m.Close()
		step = shardStep(ctx, m, func(b shardBatch) (*autograd.Var, error) { return m.Call(ctx, b.units) }, batch, phases)
		memory = m.Memory
	}
	var heap *warmheap.Loop
	if s.FitHeap {
		heap = warmheap.NewLoop(warmheap.Options{})
	}
	for i := range s.Warmup {
		if _, err := step(i); err != nil {
			return res, err
		}
		if d, ok := heap.Step(); ok {
			res.Heap = d.String()
		}
	}
	if d, ok := heap.Finish(); ok {
		res.Heap = d.String()
	}
	if err := pg.Barrier(ctx).Wait(); err != nil {
		return res, fmt.Errorf("barrier after warm-up: %w", err)
	}
	stop, err := cpuProfile(s.CPUProfile)
	if err != nil {
		return res, err
	}
	defer stop()
	var ms0 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	*phases = phaseTimes{}
	start, cpu0 := time.Now(), processCPU()
	for i := range s.Steps {
		loss, err := step(s.Warmup + i)
		if err != nil {
			return res, err
		}
		res.LastLoss = loss.Value.Item()
	}
	if err := pg.Barrier(ctx).Wait(); err != nil {
		return res, fmt.Errorf("barrier after the timed steps: %w", err)
	}
	res.Wall, res.CPU = time.Since(start), processCPU()-cpu0
	res.Phases = phases.perStep()
	res.Samples = pg.Size() * s.batch() * s.Steps
	var ms1 runtime.MemStats
	runtime.ReadMemStats(&ms1)
	res.AllocsPerStep = float64(ms1.Mallocs-ms0.Mallocs) / float64(s.Steps)
	res.AllocBytesPerStep = float64(ms1.TotalAlloc-ms0.TotalAlloc) / float64(s.Steps)
	res.GCs = ms1.NumGC - ms0.NumGC
	res.Memory = memory()
	res.PeakRSSBytes, _ = zero.PeakRSSBytes() // 0 where /proc is missing
	return res, nil
}

// shardModel is what a sharded wrapper (zero.Model, fsdp.Model) offers
// a training step after its forward pass.
type shardModel interface {
	Backward(ctx context.Context, loss *autograd.Var) error
	ClipGradNorm(ctx context.Context, maxNorm, normType float64) (float64, error)
	Step(ctx context.Context) error
	ZeroGrad()
}

// replicated is the unsharded baseline as a shardModel: ddp's backward,
// clipping over the whole local model and the plain optimizer.
type replicated struct {
	m   *ddp.Model
	mod nn.Module
	opt optim.Optimizer
}

func (r replicated) Backward(ctx context.Context, loss *autograd.Var) error {
	return r.m.Backward(ctx, loss)
}

func (r replicated) ClipGradNorm(_ context.Context, maxNorm, normType float64) (float64, error) {
	return optim.ClipGradNorm(nn.Parameters(r.mod), maxNorm, normType)
}

func (r replicated) Step(context.Context) error { r.opt.Step(); return nil }

func (r replicated) ZeroGrad() { r.opt.ZeroGrad() }

// shardStep returns the benchmark's training step under a sharded
// wrapper: call runs the batch's forward pass through m, then backward,
// clipping, the optimizer step and zeroing.
func shardStep(ctx context.Context, m shardModel, call func(shardBatch) (*autograd.Var, error), batch func(int) shardBatch, phases *phaseTimes) func(int) (*autograd.Var, error) {
	return func(i int) (*autograd.Var, error) {
		t := phaseTimer{last: time.Now()}
		b := batch(i)
		t.mark(phaseBatch)
		out, err := call(b)
		if err != nil {
			return nil, err
		}
		loss := b.loss(out)
		t.mark(phaseForward)
		if err := m.Backward(ctx, loss); err != nil {
			return nil, err
		}
		t.mark(phaseBackward)
		if _, err := m.ClipGradNorm(ctx, shardMaxNorm, 2); err != nil {
			return nil, err
		}
		t.mark(phaseClip)
		if err := m.Step(ctx); err != nil {
			return nil, err
		}
		m.ZeroGrad()
		t.mark(phaseStep)
		phases.add(t)
		return loss, nil
	}
}

// cpuProfile starts a CPU profile into path (nothing if path is empty)
// and returns the function that stops it.
func cpuProfile(path string) (stop func(), err error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err == nil {
		err = pprof.StartCPUProfile(f)
	}
	if err != nil {
		return nil, errors.Join(err, f.Close())
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}

// freeBuffers reports whether COHORT_SHARD_FREE_BUFFERS=1 asks the sharded
// wrappers to free their gradient and gather buffers after every step
// (zero.Options.FreeBuffers, fsdp.Options.FreeBuffers) instead of keeping
// them for the next.
func freeBuffers() bool { return os.Getenv("COHORT_SHARD_FREE_BUFFERS") == "1" }

// keepAfterForward reports whether COHORT_FSDP_KEEP_AFTER_FORWARD=1 asks
// fsdp to keep every unit gathered from its forward to its backward pass
// (fsdp.Options.KeepAfterForward).
func keepAfterForward() bool { return os.Getenv("COHORT_FSDP_KEEP_AFTER_FORWARD") == "1" }

// processCPU returns the process's user+system CPU time so far (0 where
// getrusage fails).
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
