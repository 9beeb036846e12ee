package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cohortml/cohort/internal/cli"
	"github.com/cohortml/cohort/obs/trace"
	"github.com/cohortml/cohort/plan"
)

const validateUsage = `usage: cohort plan validate [--device FILE] [--fabric NAME|FILE] [--ranks 1,2,4] [--steps N] [--rounds N] [--gpt PROGRAM]
                            [--save-devices DIR] [--dry-run]

Checks the predictions against runs on this machine: for every layout of
GPT-mini that a benchmark measures at each world size in --ranks (data
parallelism under none, zero1, zero2 and fsdp with cohort bench train
--shard, 32 sequences per rank; pipelines of every schedule with cohort
bench pipeline, 32 sequences in 8 microbatches), it runs the benchmark,
and prints predicted against measured tokens/s and, for the sharded
runs, the training state's bytes per rank, then the worst errors and
whether the layout the planner ranks first at each world size is the
measured best. Without --device it first profiles this machine (two
traced two-stage GPT-mini pipeline runs, microbatches of 4 and 32
sequences, as cohort plan profile reads them, with the hand-off latency
and the side-by-side factor of two ranks from the first, and, for each
tensor-parallel degree validated, a tensor-parallel run's compute and
collectives against the curve and the fabric; --save-devices writes each
round's as DIR/device-round-N.json, for cohort plan --device … --explain);
--dry-run prints the predictions and the commands without running them.

It does this --rounds times (default 3), each round profiling again and
then running every layout again, so that a profile and the runs it
predicts see the machine in the same state; it then prints, per layout,
the median prediction, the median measurement with the measurements'
range (their spread: the machine's noise), and the error of the medians
(one round: the figures alone), and judges the pick on the medians. Each
round's figures go to stderr as they come.

Tensor parallelism (tp = ranks, and dp 2 × tp 2 at 4 ranks, 32 sequences per replica) is
timed by examples/gpt under cohort run: --gpt names its executable, or
its package, built once (default ./examples/gpt, from the module's
root); it runs 2·--steps steps and the rate of the second half is
measured. A run with more ranks than this machine has cores is marked
oversubscribed: the planner is told the cores (plan.Cluster.Cores) and
shares them among the ranks.

flags:
`

// validateRun is one benchmark run and the layout it measures.
type validateRun struct {
	ranks  int
	layout plan.Layout
	model  *plan.Model
	bench  string // train, pipeline or gpt: which output parseBench reads
	args   []string
}

// Validate runs `cohort plan validate` with args: the planner's
// predictions against benchmark runs of exe (the cohort executable, whose
// `bench train` and `bench pipeline` it runs) on this machine.
func Validate(exe string, args []string, stdout, stderr io.Writer) int {
	return validate(args, validateEnv{
		exe: exe,
		exec: func(timeout time.Duration, args []string) (string, error) {
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			defer cancel()
			out, err := exec.CommandContext(ctx, exe, args...).CombinedOutput()
			return string(out), err
		},
		profile: func(o profileOptions) (*plan.Device, error) { return profileHere(exe, o, stderr) },
		load:    loadAverage,
		cores:   runtime.NumCPU(),
		stdout:  stdout, stderr: stderr,
	})
}

// validateEnv is what validate does I/O with: the tests give it fakes.
type validateEnv struct {
	exe     string
	exec    func(timeout time.Duration, args []string) (string, error) // runs `cohort ARGS`, its combined output
	profile func(profileOptions) (*plan.Device, error)                 // profiles this machine as a device
	load    func() (float64, bool)
	cores   int
	stdout  io.Writer
	stderr  io.Writer
}

// profileOptions is what a round's profile measures: the pipelines' and,
// for each degree in tp, a tensor-parallel run's figures priced with fab.
type profileOptions struct {
	steps   int
	timeout time.Duration
	tp      []int
	fab     *plan.Fabric
	cores   int
}

// validateSample is one round's prediction and measurement of a run.
type validateSample struct {
	pred, measured   float64 // tokens/s
	predState, state float64 // optimizer state per rank, bytes (state 0: not measured)
	load             float64 // the one-minute load average after the run (0: unknown)
}

// validateSummary is a run's samples over the rounds: the medians of the
// predictions and of the measurements, the error of those medians, and
// the spread of the measurements.
type validateSummary struct {
	Pred, Measured, Min, Max, Err float64
	PredState, State, StateErr    float64
	Load                          float64 // the highest load seen
	Rounds                        int
}

// summarize returns the samples' summary (at least one sample).
func summarize(xs []validateSample) validateSummary {
	col := func(f func(validateSample) float64) []float64 {
		out := make([]float64, len(xs))
		for i, x := range xs {
			out[i] = f(x)
		}
		return out
	}
	meas := col(func(x validateSample) float64 { return x.measured })
	s := validateSummary{
		Pred:      midpoint(col(func(x validateSample) float64 { return x.pred })),
		Measured:  midpoint(meas),
		Min:       slices.Min(meas),
		Max:       slices.Max(meas),
		PredState: midpoint(col(func(x validateSample) float64 { return x.predState })),
		State:     midpoint(col(func(x validateSample) float64 { return x.state })),
		Load:      slices.Max(col(func(x validateSample) float64 { return x.load })),
		Rounds:    len(xs),
	}
	s.Err = (s.Pred - s.Measured) / s.Measured
	if s.State > 0 {
		s.StateErr = (s.PredState - s.State) / s.State
	}
	return s
}

// midpoint is the median of xs, the mean of the middle two for an even
// count.
func midpoint(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

func validate(args []string, ve validateEnv) int {
	stdout, stderr := ve.stdout, ve.stderr
	fs := cli.NewFlagSet("cohort plan validate", validateUsage, stderr)
	var (
		device, fabric, ranksFlag, gpt, saveDir string
		steps, rounds                           int
		dry                                     bool
		timeout                                 time.Duration
	)
	fs.StringVar(&device, "device", "", "this machine's device file (cohort plan profile); default: profile it first, every round")
	fs.StringVar(&fabric, "fabric", "local", "the fabric between this machine's ranks")
	fs.StringVar(&ranksFlag, "ranks", "1,2,4", "world sizes to run")
	fs.IntVar(&steps, "steps", 20, "timed steps per run")
	fs.IntVar(&rounds, "rounds", 3, "rounds: each profiles again (without --device) and runs every layout again")
	fs.StringVar(&gpt, "gpt", "./examples/gpt", "examples/gpt's executable, or its Go package (built once), for the tensor-parallel runs; \"\": none")
	fs.StringVar(&saveDir, "save-devices", "", "write each round's profiled device to this directory (device-round-N.json)")
	fs.BoolVar(&dry, "dry-run", false, "print the predictions and commands, run nothing")
	fs.DurationVar(&timeout, "timeout", 10*time.Minute, "bound on each run")
	if status, ok := cli.Parse(fs, args); !ok {
		return status
	}
	fail := func(err error) int {
		fmt.Fprintln(stderr, "cohort plan validate:", err)
		return 1
	}
	if rounds < 1 {
		return fail(fmt.Errorf("--rounds %d: want at least 1", rounds))
	}
	if dry {
		rounds = 1
	}
	var fixed *plan.Device
	var err error
	if device != "" {
		if fixed, err = plan.LoadDevice(device, os.ReadFile); err != nil {
			return fail(err)
		}
	} else if dry {
		fmt.Fprintln(stderr, "cohort plan validate: --dry-run needs --device")
		return 2
	}
	fab, err := plan.LoadFabric(fabric, os.ReadFile)
	if err != nil {
		return fail(err)
	}
	var ranks []int
	for _, f := range strings.Split(ranksFlag, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return fail(fmt.Errorf("--ranks: %q is not a world size", f))
		}
		ranks = append(ranks, n)
	}
	cores := ve.cores
	gptExe := gpt
	if gpt != "" && !dry {
		var cleanup func()
		if gptExe, cleanup, err = buildProgram(gpt); err != nil {
			fmt.Fprintf(stderr, "cohort plan validate: no tensor-parallel runs: %v\n", err)
			gptExe = ""
		}
		defer cleanup()
	}
	runs := validateRuns(ranks, steps, cores, gptExe)
	var tpDegrees []int
	for _, r := range runs {
		if r.layout.TP > 1 && !slices.Contains(tpDegrees, r.layout.TP) {
			tpDegrees = append(tpDegrees, r.layout.TP)
		}
	}
	samples := make([][]validateSample, len(runs))
	for round := range rounds {
		dev := fixed
		if dev == nil {
			if dev, err = ve.profile(profileOptions{steps: steps, timeout: timeout, tp: tpDegrees, fab: fab, cores: cores}); err != nil {
				return fail(err)
			}
			if saveDir != "" {
				if err := saveDevice(filepath.Join(saveDir, fmt.Sprintf("device-round-%d.json", round+1)), dev); err != nil {
					return fail(err)
				}
			}
		}
		for i, r := range runs {
			env := &plan.Env{Model: r.model, Device: dev, Fabric: fab, Cluster: plan.Cluster{Nodes: 1, ProcsPerNode: r.ranks, Cores: cores}}
			pred, err := plan.Predict(env, r.layout)
			if err != nil {
				return fail(err)
			}
			if dry {
				fmt.Fprintf(stdout, "%s predicted tokens/s %.0f  # cohort %s\n", r.label(cores), pred.TokensPerSec, strings.Join(r.args, " "))
				continue
			}
			out, err := ve.exec(timeout, r.args)
			if err != nil {
				return fail(fmt.Errorf("cohort %s: %w\n%s", strings.Join(r.args, " "), err, tail(out, 2000)))
			}
			x := validateSample{pred: pred.TokensPerSec, predState: float64(pred.Memory.Optimizer)}
			if x.measured, x.state, err = parseBench(out, r.bench); err != nil {
				return fail(fmt.Errorf("cohort %s: %w", strings.Join(r.args, " "), err))
			}
			if l, ok := ve.load(); ok {
				x.load = l
			}
			samples[i] = append(samples[i], x)
			if rounds > 1 {
				fmt.Fprintf(stderr, "cohort plan validate: round %d/%d: %s predicted tokens/s %.0f measured %.0f error %+.1f%% load %.2f\n",
					round+1, rounds, strings.TrimPrefix(r.label(cores), "validate: "), x.pred, x.measured, 100*(x.pred-x.measured)/x.measured, x.load)
			}
		}
	}
	if dry {
		return 0
	}
	sums := make([]validateSummary, len(runs))
	worstTok, worstMem := 0.0, 0.0
	for i, r := range runs {
		s := summarize(samples[i])
		sums[i] = s
		if math.Abs(s.Err) > math.Abs(worstTok) {
			worstTok = s.Err
		}
		line := fmt.Sprintf("%s predicted tokens/s %.0f measured %.0f", r.label(cores), s.Pred, s.Measured)
		if s.Rounds > 1 {
			// medians over the rounds, and the measurements' spread
			line += fmt.Sprintf(" (%.0f–%.0f over %d rounds)", s.Min, s.Max, s.Rounds)
		}
		line += fmt.Sprintf(" error %+.1f%%", 100*s.Err)
		if s.Load > 0 {
			line += fmt.Sprintf(" load %.2f", s.Load) // the machine's other work: a load above the cores disturbs the figure
		}
		if s.State > 0 {
			// bench train's state-bytes/rank is the optimizer state
			if math.Abs(s.StateErr) > math.Abs(worstMem) {
				worstMem = s.StateErr
			}
			line += fmt.Sprintf(" optimizer-state/rank predicted %.2f measured %.2f MiB error %+.1f%%", s.PredState/(1<<20), s.State/(1<<20), 100*s.StateErr)
		}
		fmt.Fprintln(stdout, line)
	}
	of := ""
	if rounds > 1 {
		of = " (of medians)"
	}
	fmt.Fprintf(stdout, "validate: worst tokens/s error%s %+.1f%% (aim 15%%), worst optimizer-state error %+.1f%% (aim 10%%)\n", of, 100*worstTok, 100*worstMem)
	for _, n := range ranks {
		bestPred, bestMeas := -1, -1
		for i, r := range runs {
			if r.ranks != n {
				continue
			}
			if bestPred < 0 || sums[i].Pred > sums[bestPred].Pred {
				bestPred = i
			}
			if bestMeas < 0 || sums[i].Measured > sums[bestMeas].Measured {
				bestMeas = i
			}
		}
		if bestPred < 0 {
			continue
		}
		fmt.Fprintf(stdout, "validate: %d ranks: the planner picks %v (measured %.0f), the measured best is %v (%.0f): within %.1f%%\n",
			n, runs[bestPred].layout, sums[bestPred].Measured, runs[bestMeas].layout, sums[bestMeas].Measured, 100*(1-sums[bestPred].Measured/sums[bestMeas].Measured))
	}
	return 0
}

// saveDevice writes dev to path as indented JSON, making its directory.
func saveDevice(path string, dev *plan.Device) error {
	b, err := json.MarshalIndent(dev, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// label is the start of a run's result line.
func (r validateRun) label(cores int) string {
	if r.ranks > cores {
		return fmt.Sprintf("validate: %v (oversubscribed: %d ranks on %d cores)", r.layout, r.ranks, cores)
	}
	return fmt.Sprintf("validate: %v", r.layout)
}

// validateRuns lists the benchmark runs at each world size in ranks, with
// steps timed steps each; gptExe "" leaves out tensor parallelism.
func validateRuns(ranks []int, steps, cores int, gptExe string) []validateRun {
	var runs []validateRun
	st := strconv.Itoa(steps)
	for _, n := range ranks {
		// data parallelism: cohort bench train --shard, 32 sequences per rank
		dpModel, _ := plan.NamedModel("gpt")
		dpModel.GlobalBatch = 32 * n
		shards := plan.Shards
		if n == 1 {
			shards = []string{"none"}
		}
		for _, sh := range shards {
			runs = append(runs, validateRun{ranks: n, model: dpModel, bench: "train",
				layout: plan.Layout{DP: n, PP: 1, TP: 1, Shard: sh, Microbatches: 1, Schedule: "none", Virtual: 1},
				args:   []string{"bench", "train", "--model", "gpt", "--world", strconv.Itoa(n), "--shard", sh, "--steps", st}})
		}
		// pipelines: cohort bench pipeline, 32 sequences in 8 microbatches
		if n < 2 {
			continue
		}
		ppModel, _ := plan.NamedModel("gpt")
		for _, sc := range []plan.Layout{{Schedule: "gpipe", Virtual: 1}, {Schedule: "1f1b", Virtual: 1}, {Schedule: "zb", Virtual: 1}, {Schedule: "interleaved", Virtual: 2}} {
			if n*sc.Virtual > ppModel.Layers {
				continue
			}
			runs = append(runs, validateRun{ranks: n, model: ppModel, bench: "pipeline",
				layout: plan.Layout{DP: 1, PP: n, TP: 1, Shard: "none", Microbatches: 8, Schedule: sc.Schedule, Virtual: sc.Virtual},
				args: []string{"bench", "pipeline", "--stages", strconv.Itoa(n), "--schedule", sc.Schedule, "--virtual", strconv.Itoa(sc.Virtual),
					"--microbatches", "8", "--batch", "32", "--steps", st}})
		}
		// tensor parallelism: examples/gpt under cohort run, 32
		// sequences per replica
		if gptExe == "" {
			continue
		}
		for _, dp := range []int{1, 2} {
			tp := n / dp
			if n%dp != 0 || tp < 2 {
				continue
			}
			tpModel, _ := plan.NamedModel("gpt")
			tpModel.GlobalBatch = 32 * dp
			args := []string{"run", "--nproc-per-node", strconv.Itoa(n)}
			if n > cores {
				args = append(args, "--oversubscribe")
			}
			args = append(args, gptExe, "-dp", strconv.Itoa(dp), "-tp", strconv.Itoa(tp), "-steps", strconv.Itoa(2*steps),
				"-log-every", st, "-eval-every", "0")
			runs = append(runs, validateRun{ranks: n, model: tpModel, bench: "gpt",
				layout: plan.Layout{DP: dp, PP: 1, TP: tp, Shard: "none", Microbatches: 1, Schedule: "none", Virtual: 1},
				args:   args})
		}
	}
	return runs
}

// profileHere measures this machine as a device, as cohort plan profile
// does, from two traced GPT-mini pipeline runs of two stages: microbatches
// of 4 sequences (the validated pipelines') and of 32 (the data-parallel
// runs').
//
// For each tensor-parallel degree in o.tp it then runs a tensor-parallel
// GPT-mini of that many ranks (32 sequences a step, as the validated
// runs) and records what tensor parallelism pays beyond the curve and the
// fabric o.fab (plan.MeasureTP): the sharded layers' compute against the
// curve's, and each activation all-reduce's time beyond the fabric's.
func profileHere(exe string, o profileOptions, stderr io.Writer) (*plan.Device, error) {
	steps, timeout := o.steps, o.timeout
	m, _ := plan.NamedModel("gpt")
	dev := &plan.Device{Name: "this-machine", MemoryBytes: 8 << 30,
		Source: "cohort plan validate: fp32 rates of whole layers, and memory_bandwidth as the rate of the step outside the pipeline (AdamW, clipping, the batch), measured from traced pipeline runs; memory_bytes not measured"}
	var rates []float64
	dir, err := os.MkdirTemp("", "cohort-plan-profile-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	for _, run := range []struct{ batch, microbatches int }{{32, 8}, {64, 2}} {
		tdir := filepath.Join(dir, strconv.Itoa(run.batch))
		args := []string{"bench", "pipeline", "--stages", "2", "--schedule", "1f1b", "--batch", strconv.Itoa(run.batch),
			"--microbatches", strconv.Itoa(run.microbatches), "--steps", strconv.Itoa(steps), "--trace", tdir}
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		out, err := exec.CommandContext(ctx, exe, args...).CombinedOutput()
		cancel()
		if err != nil {
			return nil, fmt.Errorf("cohort %s: %w\n%s", strings.Join(args, " "), err, tail(string(out), 2000))
		}
		spans, err := ComputeSpans(tdir)
		if err != nil {
			return nil, err
		}
		ms, err := plan.Measure(m, run.batch/run.microbatches, spans)
		if err != nil {
			return nil, err
		}
		handoff, sb, err := MeasurePipeline(tdir)
		if err != nil {
			return nil, err
		}
		// the curve is a rank's rate alone; the side-by-side factor
		// charges the ranks computing at once
		ms.Rate *= sb.Ratio
		if run.microbatches == 8 { // the validated pipelines' messages, and most passes side by side
			dev.HandoffSeconds = math.Round(handoff*1e6) / 1e6
			plan.AddSideBySide(dev, sb.Ranks, sb.Factor)
		}
		fmt.Fprintf(stderr, "cohort plan validate: profiled microbatches of %d: hand-off %.0f µs beyond the fastest; passes %.3f× their time alone, %.0f%% of it side by side: factor %.3f at %d ranks\n",
			run.batch/run.microbatches, handoff*1e6, sb.Ratio, 100*sb.Overlap, sb.Factor, sb.Ranks)
		outside, err := OutsideSeconds(tdir)
		if err != nil {
			return nil, err
		}
		rate, err := plan.MeasureOptimizer(m, outside)
		if err != nil {
			return nil, err
		}
		rates = append(rates, rate)
		outMs := make([]string, len(outside))
		for i, o := range outside {
			outMs[i] = fmt.Sprintf("%.2f", o*1e3)
		}
		fmt.Fprintf(stderr, "cohort plan validate: profiled microbatches of %d: %.3g FLOP/s; outside the pipeline, ms per step by rank, %s: optimizer %.3g bytes/s\n",
			run.batch/run.microbatches, ms.Rate, strings.Join(outMs, " "), rate)
		plan.AddMeasurement(dev, "fp32", ms)
	}
	dev.MemoryBandwidth = min(rates[0], rates[1])
	if err := dev.Validate(); err != nil {
		return nil, err
	}
	for _, t := range o.tp {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		run, r, err := profileTP(ctx, exe, t, 32, max(steps/2, 5))
		cancel()
		if err != nil {
			return nil, err
		}
		tpModel, _ := plan.NamedModel("gpt")
		tpModel.GlobalBatch = 32
		env := &plan.Env{Model: tpModel, Device: dev, Fabric: o.fab, Cluster: plan.Cluster{Nodes: 1, ProcsPerNode: t, Cores: o.cores}}
		pt, err := plan.MeasureTP(env, plan.Layout{DP: 1, PP: 1, TP: t, Shard: "none", Microbatches: 1, Schedule: "none", Virtual: 1}, run)
		if err != nil {
			return nil, err
		}
		plan.AddTP(dev, pt)
		fmt.Fprintf(stderr, "cohort plan validate: profiled tp %d: forward+backward %.1f ms outside collectives (%.3f× the curve's); %d activation all-reduces of %d bytes a step, mean %.0f µs (%.0f µs beyond the fabric); %d small, mean %.0f µs\n",
			t, r.Compute*1e3, pt.Compute, r.PerStep, r.Bytes, r.Collective*1e6, pt.CollectiveSeconds*1e6, r.SmallStep, r.Small*1e6)
	}
	return dev, dev.Validate()
}

// parseBench reads tokens/s (and, from bench train, the optimizer state
// per rank) from a benchmark's last lines.
func parseBench(out, which string) (tokens, stateBytes float64, err error) {
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		switch {
		case which == "train" && len(f) >= 10 && f[0] == "train:" && f[4] == "shard":
			// train: gpt world N shard S samples/s X state-bytes/rank Y …
			for i := 0; i+1 < len(f); i++ {
				switch f[i] {
				case "samples/s":
					v, perr := strconv.ParseFloat(f[i+1], 64)
					if perr != nil {
						return 0, 0, perr
					}
					tokens = v * 64 // GPT-mini sequences of 64 tokens
				case "state-bytes/rank":
					if stateBytes, err = strconv.ParseFloat(f[i+1], 64); err != nil {
						return 0, 0, err
					}
				}
			}
		case which == "gpt" && strings.Contains(line, ": train loss "):
			// [rank 0] step N: train loss L, mean of steps A–B M, X tokens/s
			for i := 1; i < len(f); i++ {
				if f[i] == "tokens/s" {
					if tokens, err = strconv.ParseFloat(f[i-1], 64); err != nil {
						return 0, 0, err
					}
				}
			}
		case which == "pipeline" && len(f) >= 9 && f[0] == "pipeline:" && f[1] == "schedule":
			for i := 0; i+1 < len(f); i++ {
				if f[i] == "tokens/s" {
					if tokens, err = strconv.ParseFloat(f[i+1], 64); err != nil {
						return 0, 0, err
					}
				}
			}
		}
	}
	if tokens == 0 {
		return 0, 0, fmt.Errorf("no result line in its output:\n%s", tail(out, 2000))
	}
	return tokens, stateBytes, nil
}

// loadAverage returns the machine's one-minute load average
// (/proc/loadavg), where there is one.
func loadAverage() (float64, bool) {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0, false
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0, false
	}
	v, err := strconv.ParseFloat(f[0], 64)
	return v, err == nil
}

// buildProgram returns prog if it is an executable file, else builds it
// as a Go package (go build, from the working directory's module) into a
// temporary directory that cleanup removes.
func buildProgram(prog string) (exe string, cleanup func(), err error) {
	cleanup = func() {}
	if st, err := os.Stat(prog); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
		return prog, cleanup, nil
	}
	dir, err := os.MkdirTemp("", "cohort-plan-validate-")
	if err != nil {
		return "", cleanup, err
	}
	cleanup = func() { os.RemoveAll(dir) }
	exe = filepath.Join(dir, filepath.Base(prog))
	if out, err := exec.Command("go", "build", "-o", exe, prog).CombinedOutput(); err != nil {
		return "", cleanup, fmt.Errorf("go build %s: %w\n%s", prog, err, tail(string(out), 2000))
	}
	return exe, cleanup, nil
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

// ComputeSpans reads the "compute" spans of a trace file, or of every
// rank's file in a trace directory.
func ComputeSpans(path string) ([]plan.Span, error) {
	var spans []plan.Span
	err := readTraces(path, func(events []trace.Event) {
		for _, e := range events {
			if e.Ph == "X" && e.Cat == "compute" && e.Dur != nil && e.PID != nil {
				spans = append(spans, plan.Span{Rank: *e.PID, Name: e.Name, Seconds: *e.Dur / 1e6})
			}
		}
	})
	if err != nil {
		return nil, err
	}
	return spans, nil
}

// readTraces calls fn with the events of a trace file, or of every rank's
// file in a trace directory, in turn.
func readTraces(path string, fn func([]trace.Event)) error {
	files := []string{path}
	if st, err := os.Stat(path); err != nil {
		return err
	} else if st.IsDir() {
		if files, err = filepath.Glob(filepath.Join(path, "rank-*.json")); err != nil || len(files) == 0 {
			return fmt.Errorf("%s: no rank-*.json trace files", path)
		}
	}
	for _, f := range files {
		r, err := os.Open(f)
		if err != nil {
			return err
		}
		events, err := trace.Read(r, f)
		r.Close()
		if err != nil {
			return err
		}
		fn(events)
	}
	return nil
}

// OutsideSeconds reads each rank's median time per step outside the
// pipeline's Step from a trace file or directory of `cohort bench
// pipeline --trace`: a "step" span less the stretch from its first to its
// last pipeline span (compute, p2p and comm tracks). Element r is rank r's.
func OutsideSeconds(path string) ([]float64, error) {
	perRank := map[int][]float64{}
	err := readTraces(path, func(events []trace.Event) {
		var steps, inner []trace.Event
		for _, e := range events {
			if e.Ph != "X" || e.Dur == nil || e.PID == nil || e.TS == nil {
				continue
			}
			switch e.Cat {
			case trace.Step:
				steps = append(steps, e)
			case trace.Compute, trace.P2P, trace.Comm:
				inner = append(inner, e)
			}
		}
		for _, s := range steps {
			first, last := math.Inf(1), math.Inf(-1)
			for _, e := range inner {
				if *e.PID == *s.PID && *e.TS >= *s.TS && *e.TS+*e.Dur <= *s.TS+*s.Dur {
					first, last = min(first, *e.TS), max(last, *e.TS+*e.Dur)
				}
			}
			if last > first {
				perRank[*s.PID] = append(perRank[*s.PID], (*s.Dur-(last-first))/1e6)
			}
		}
	})
	if err != nil {
		return nil, err
	}
	out := make([]float64, len(perRank))
	for r, xs := range perRank {
		if r < 0 || r >= len(out) {
			return nil, fmt.Errorf("%s: ranks %v: want 0 to %d", path, r, len(out)-1)
		}
		out[r] = median(xs)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no step spans with pipeline spans inside", path)
	}
	return out, nil
}

// PipelineSpans reads the compute and p2p spans of a pipeline run's trace
// on one clock: a merged trace file as it is, a trace directory's rank
// files merged (trace.Merge aligns their clocks). Start is in seconds.
func PipelineSpans(path string) ([]plan.Span, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	var events []trace.Event
	if st.IsDir() {
		var b bytes.Buffer
		if _, err := trace.Merge(path, &b); err != nil {
			return nil, err
		}
		events, err = trace.Read(&b, path)
	} else {
		var f *os.File
		if f, err = os.Open(path); err != nil {
			return nil, err
		}
		events, err = trace.Read(f, path)
		f.Close()
	}
	if err != nil {
		return nil, err
	}
	var spans []plan.Span
	for _, e := range events {
		if e.Ph == "X" && (e.Cat == trace.Compute || e.Cat == trace.P2P) && e.Dur != nil && e.PID != nil && e.TS != nil {
			spans = append(spans, plan.Span{Rank: *e.PID, Name: e.Name, Seconds: *e.Dur / 1e6, Start: *e.TS / 1e6, Track: e.Cat})
		}
	}
	return spans, nil
}

// BaselineDir returns where cohort bench pipeline --trace wrote the
// one-rank baseline's trace beside the pipelined run's trace at path (a
// trace directory or a file in it): DIR/baseline, if it is there.
func BaselineDir(path string) (string, bool) {
	dir := path
	if st, err := os.Stat(path); err == nil && !st.IsDir() {
		dir = filepath.Dir(path)
	}
	b := filepath.Join(dir, "baseline")
	st, err := os.Stat(b)
	return b, err == nil && st.IsDir()
}

// MeasurePipeline reads what a pipeline run's trace at path says beyond
// its passes' rate: the hand-off latency (plan.MeasureHandoff) and, when
// the baseline's trace is beside it, the side-by-side factor of its
// ranks with the ratio of the pipelined passes' time to their time alone
// (plan.MeasureSideBySide; without a baseline, ratio and factor 1 and
// Ranks 0), by which the rate measured on the pipeline is raised to a
// rank's alone.
func MeasurePipeline(path string) (handoff float64, sb plan.SideBySide, err error) {
	spans, err := PipelineSpans(path)
	if err != nil {
		return 0, sb, err
	}
	if handoff, _, err = plan.MeasureHandoff(spans); err != nil {
		return 0, sb, err
	}
	sb.Ratio, sb.Factor = 1, 1
	if b, ok := BaselineDir(path); ok {
		alone, err := PipelineSpans(b)
		if err != nil {
			return 0, sb, err
		}
		if sb, err = plan.MeasureSideBySide(spans, alone); err != nil {
			return 0, sb, err
		}
	}
	return handoff, sb, nil
}
