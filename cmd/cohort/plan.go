package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/cohortml/cohort/obs/trace"
	"github.com/cohortml/cohort/plan"
)

const planUsage = `usage: cohort plan profile …   (measure this machine as a device; cohort plan profile -h)
       cohort plan validate …  (predicted against measured on this machine; cohort plan validate -h)
       cohort plan --model gpt|gpt2|mlp | --model-config FILE --nodes N --procs-per-node P
                   [--mem-per-rank M] [--device NAME|FILE] [--fabric NAME|FILE] [--explain K] [--top K]
                   [--scale N1,N2,…]

Predicts the step time and peak memory per rank of every DP × PP × TP ×
shard layout of the model on N nodes of P ranks (package plan) and prints
the layouts that fit, fastest first, one line each:

  plan: dp D pp P tp T shard S microbatches M schedule X tokens/s Y memory/rank Z

(Z in MiB; X is none without a pipeline, else gpipe, 1f1b, zb or
interleaved:V with V chunks per rank). The last line is the fastest
layout that a cohort program runs, as its command. --explain K breaks
the first K layouts' step down (compute, tensor-parallel all-reduces,
bubble, pipeline transfers, exposed data-parallel communication,
optimizer) and their memory; --scale evaluates the node counts given (N
is then ignored) and says where each layout shape stops scaling and why.

--mem-per-rank takes bytes or a size with a unit (80GiB, 512MiB); the
default is the device's memory. --device and --fabric take a file or a
name kept in the repository: devices a100-80gb (default), h100-sxm;
fabrics dgx-a100 (default), dgx-h100, local (cohort's shm and TCP on one
machine). Model files are JSON: {"name", "layers", "d_model", "heads",
"seq", "vocab", "global_batch", "micro_batch", "ffn", "tied_embeddings",
"precision": "fp32"|"mixed", "recompute"} (or "kind": "mlp" with
"widths").

flags:
`

// runPlan is `cohort plan` (and `cohort plan profile`).
func runPlan(args []string) int {
	if len(args) > 0 && args[0] == "profile" {
		return planProfile(args[1:], os.Stdout, os.Stderr)
	}
	if len(args) > 0 && args[0] == "validate" {
		return planValidate(args[1:], os.Stdout, os.Stderr)
	}
	return planMain(args, os.Stdout, os.Stderr, os.ReadFile)
}

const profileUsage = `usage: cohort plan profile --microbatch B [--model gpt | --model-config FILE] [--device FILE]
                           [--name NAME] [--memory-bytes M] [--memory-bandwidth BPS] [-o FILE] TRACE

Measures this machine as a plan device: reads the compute passes (F, B,
I, W) of a pipeline run's trace, made with

  cohort bench pipeline --trace DIR --batch N --microbatches M …
  cohort trace merge DIR            # TRACE is DIR/merged.json (or DIR)

prices each pass with the model's FLOPs (GPT-mini by default; B = N/M
sequences per microbatch) and writes a device whose fp32 efficiency curve
has the rate the layers reached at that size. With --device FILE the
point is added to that device's curve (runs at several microbatch sizes
make a curve). Memory size and bandwidth are not measured: they come
from the flags (the bandwidth prices only the optimizer step, since the
measured curve covers the layers' elementwise work).

flags:
`

func planProfile(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("cohort plan profile", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, profileUsage)
		fs.PrintDefaults()
	}
	var (
		modelName, modelFile, devFile, name, out, mem string
		microbatch                                    int
		bandwidth                                     float64
	)
	fs.StringVar(&modelName, "model", "gpt", "the traced model: gpt (GPT-mini, what cohort bench pipeline trains) or gpt2")
	fs.StringVar(&modelFile, "model-config", "", "the traced model as a model file")
	fs.IntVar(&microbatch, "microbatch", 0, "sequences per microbatch of the traced run (--batch / --microbatches)")
	fs.StringVar(&devFile, "device", "", "a device file to add the measurement to (default: a new device)")
	fs.StringVar(&name, "name", "cpu", "the new device's name")
	fs.StringVar(&mem, "memory-bytes", "8GiB", "memory one rank may use (not measured)")
	fs.Float64Var(&bandwidth, "memory-bandwidth", 10e9, "bytes/s of memory for the optimizer step (not measured)")
	fs.StringVar(&out, "o", "", "write the device here (default: standard output)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	fail := func(err error) int {
		fmt.Fprintln(stderr, "cohort plan profile:", err)
		return 1
	}
	if fs.NArg() != 1 {
		fmt.Fprintln(stderr, "cohort plan profile: want one TRACE (a merged trace, a rank's file or the trace directory)")
		return 2
	}
	var m *plan.Model
	var err error
	if modelFile != "" {
		data, rerr := os.ReadFile(modelFile)
		if rerr != nil {
			return fail(rerr)
		}
		m, err = plan.ParseModel(data)
	} else {
		m, err = plan.NamedModel(modelName)
	}
	if err != nil {
		return fail(err)
	}
	spans, err := readComputeSpans(fs.Arg(0))
	if err != nil {
		return fail(err)
	}
	ms, err := plan.Measure(m, microbatch, spans)
	if err != nil {
		return fail(err)
	}
	dev := &plan.Device{Name: name}
	if devFile != "" {
		data, rerr := os.ReadFile(devFile)
		if rerr != nil {
			return fail(rerr)
		}
		if dev, err = plan.ParseDevice(data); err != nil {
			return fail(err)
		}
	} else {
		if dev.MemoryBytes, err = parseBytes(mem); err != nil {
			return fail(fmt.Errorf("--memory-bytes: %w", err))
		}
		dev.MemoryBandwidth = bandwidth
		dev.Source = "cohort plan profile: fp32 rates of whole layers measured from pipeline traces; memory_bytes and memory_bandwidth from flags, not measured"
	}
	plan.AddMeasurement(dev, "fp32", ms)
	if err := dev.Validate(); err != nil {
		return fail(err)
	}
	data, err := json.MarshalIndent(dev, "", "  ")
	if err != nil {
		return fail(err)
	}
	data = append(data, '\n')
	fmt.Fprintf(stderr, "cohort plan profile: %s, %d stages, %d passes, microbatches of %d: %.3g FLOP/s at %.3g FLOPs per layer\n",
		m.Name, ms.Stages, ms.Passes, microbatch, ms.Rate, ms.GEMM)
	if out == "" {
		_, err = stdout.Write(data)
	} else {
		err = os.WriteFile(out, data, 0o644)
	}
	if err != nil {
		return fail(err)
	}
	return 0
}

// readComputeSpans reads the "compute" spans of a trace file, or of every
// rank's file in a trace directory.
func readComputeSpans(path string) ([]plan.Span, error) {
	files := []string{path}
	if st, err := os.Stat(path); err != nil {
		return nil, err
	} else if st.IsDir() {
		if files, err = filepath.Glob(filepath.Join(path, "rank-*.json")); err != nil || len(files) == 0 {
			return nil, fmt.Errorf("%s: no rank-*.json trace files", path)
		}
	}
	var spans []plan.Span
	for _, f := range files {
		r, err := os.Open(f)
		if err != nil {
			return nil, err
		}
		events, err := trace.Read(r, f)
		r.Close()
		if err != nil {
			return nil, err
		}
		for _, e := range events {
			if e.Ph == "X" && e.Cat == "compute" && e.Dur != nil && e.PID != nil {
				spans = append(spans, plan.Span{Rank: *e.PID, Name: e.Name, Seconds: *e.Dur / 1e6})
			}
		}
	}
	return spans, nil
}

func planMain(args []string, stdout, stderr io.Writer, readFile func(string) ([]byte, error)) int {
	fs := flag.NewFlagSet("cohort plan", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, planUsage)
		fs.PrintDefaults()
	}
	var (
		modelName, modelFile, device, fabric, mem, scale string
		nodes, procs, explain, top                       int
	)
	fs.StringVar(&modelName, "model", "", "gpt (GPT-mini), gpt2 (GPT-2 small) or mlp (the MNIST MLP)")
	fs.StringVar(&modelFile, "model-config", "", "a model description (JSON) instead of --model")
	fs.IntVar(&nodes, "nodes", 1, "nodes")
	fs.IntVar(&procs, "procs-per-node", 1, "ranks per node")
	fs.StringVar(&mem, "mem-per-rank", "", "memory one rank may use (default: the device's)")
	fs.StringVar(&device, "device", "a100-80gb", "device: a file or a name (a100-80gb, h100-sxm)")
	fs.StringVar(&fabric, "fabric", "dgx-a100", "fabric: a file or a name (dgx-a100, dgx-h100, local)")
	fs.IntVar(&explain, "explain", 0, "break down the first K layouts")
	fs.IntVar(&top, "top", 0, "print only the K fastest layouts (0: all)")
	fs.StringVar(&scale, "scale", "", "node counts to sweep, comma-separated (e.g. 8,16,32,…,4096)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	fail := func(err error) int {
		fmt.Fprintln(stderr, "cohort plan:", err)
		return 1
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "cohort plan: unexpected arguments %q\n", fs.Args())
		return 2
	}
	env := &plan.Env{Cluster: plan.Cluster{Nodes: nodes, ProcsPerNode: procs}}
	var err error
	switch {
	case modelName != "" && modelFile != "":
		fmt.Fprintln(stderr, "cohort plan: --model and --model-config exclude each other")
		return 2
	case modelFile != "":
		data, rerr := readFile(modelFile)
		if rerr != nil {
			return fail(rerr)
		}
		env.Model, err = plan.ParseModel(data)
	case modelName != "":
		env.Model, err = plan.NamedModel(modelName)
	default:
		fmt.Fprintln(stderr, "cohort plan: want --model or --model-config")
		return 2
	}
	if err != nil {
		return fail(err)
	}
	if env.Device, err = loadDevice(device, readFile); err != nil {
		return fail(err)
	}
	if env.Fabric, err = loadFabric(fabric, readFile); err != nil {
		return fail(err)
	}
	if mem != "" {
		if env.Cluster.MemPerRank, err = parseBytes(mem); err != nil {
			return fail(fmt.Errorf("--mem-per-rank: %w", err))
		}
	}
	if scale != "" {
		var ns []int
		for _, f := range strings.Split(scale, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 1 {
				return fail(fmt.Errorf("--scale: %q is not a node count", f))
			}
			ns = append(ns, n)
		}
		for _, sp := range plan.Sweep(env, ns) {
			if sp.Err != nil {
				fmt.Fprintf(stdout, "nodes %d: %v\n", sp.Nodes, sp.Err)
				continue
			}
			what, share := sp.Best.Limit()
			fmt.Fprintf(stdout, "nodes %d: %s (limit: %s %.0f%%)\n", sp.Nodes, strings.TrimPrefix(sp.Best.Line(), "plan: "), what, 100*share)
		}
		for _, f := range plan.Families(env, ns) {
			fmt.Fprintln(stdout, f)
		}
		return 0
	}
	ps, err := plan.Search(env)
	if err != nil {
		return fail(err)
	}
	for i, p := range ps {
		if top > 0 && i >= top {
			break
		}
		fmt.Fprintln(stdout, p.Line())
	}
	for i := 0; i < explain && i < len(ps); i++ {
		fmt.Fprint(stdout, ps[i].Explain(env))
	}
	fmt.Fprintln(stdout, plan.Choose(env, ps))
	return 0
}

// loadDevice reads a device file, or a name kept in the repository when
// the argument names no file and has no path separator or extension.
func loadDevice(arg string, readFile func(string) ([]byte, error)) (*plan.Device, error) {
	if isName(arg) {
		return plan.BuiltinDevice(arg)
	}
	data, err := readFile(arg)
	if err != nil {
		return nil, err
	}
	return plan.ParseDevice(data)
}

func loadFabric(arg string, readFile func(string) ([]byte, error)) (*plan.Fabric, error) {
	if isName(arg) {
		return plan.BuiltinFabric(arg)
	}
	data, err := readFile(arg)
	if err != nil {
		return nil, err
	}
	return plan.ParseFabric(data)
}

func isName(s string) bool { return !strings.ContainsAny(s, `/\.`) }

// parseBytes reads 85899345920, 80GiB, 512MiB, 80GB, 1.5TiB.
func parseBytes(s string) (int64, error) {
	units := []struct {
		suffix string
		mul    float64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"TB", 1e12}, {"GB", 1e9}, {"MB", 1e6}, {"KB", 1e3}, {"B", 1}}
	mul := 1.0
	num := strings.TrimSpace(s)
	for _, u := range units {
		if v, ok := strings.CutSuffix(num, u.suffix); ok {
			num, mul = strings.TrimSpace(v), u.mul
			break
		}
	}
	v, err := strconv.ParseFloat(num, 64)
	if err != nil || !(v > 0) {
		return 0, fmt.Errorf("%q: want bytes > 0, e.g. 80GiB", s)
	}
	return int64(v * mul), nil
}

const validateUsage = `usage: cohort plan validate [--device FILE] [--fabric NAME|FILE] [--ranks 1,2,4] [--steps N] [--dry-run]

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
sequences, as cohort plan profile reads them); --dry-run prints the
predictions and the commands without running them. The ranks of a run
should have a core each. Tensor parallelism has no benchmark yet and is
left out.

flags:
`

// validateRun is one benchmark run and the layout it measures.
type validateRun struct {
	ranks  int
	layout plan.Layout
	model  *plan.Model
	args   []string
}

func planValidate(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("cohort plan validate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, validateUsage)
		fs.PrintDefaults()
	}
	var (
		device, fabric, ranksFlag string
		steps                     int
		dry                       bool
		timeout                   time.Duration
	)
	fs.StringVar(&device, "device", "", "this machine's device file (cohort plan profile); default: profile it first")
	fs.StringVar(&fabric, "fabric", "local", "the fabric between this machine's ranks")
	fs.StringVar(&ranksFlag, "ranks", "1,2,4", "world sizes to run")
	fs.IntVar(&steps, "steps", 20, "timed steps per run")
	fs.BoolVar(&dry, "dry-run", false, "print the predictions and commands, run nothing")
	fs.DurationVar(&timeout, "timeout", 10*time.Minute, "bound on each run")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	fail := func(err error) int {
		fmt.Fprintln(stderr, "cohort plan validate:", err)
		return 1
	}
	exe, err := os.Executable()
	if err != nil {
		return fail(err)
	}
	var dev *plan.Device
	if device != "" {
		if dev, err = loadDevice(device, os.ReadFile); err != nil {
			return fail(err)
		}
	} else if !dry {
		if dev, err = profileHere(exe, steps, timeout, stderr); err != nil {
			return fail(err)
		}
	} else {
		fmt.Fprintln(stderr, "cohort plan validate: --dry-run needs --device")
		return 2
	}
	fab, err := loadFabric(fabric, os.ReadFile)
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
			runs = append(runs, validateRun{ranks: n, model: dpModel,
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
			runs = append(runs, validateRun{ranks: n, model: ppModel,
				layout: plan.Layout{DP: 1, PP: n, TP: 1, Shard: "none", Microbatches: 8, Schedule: sc.Schedule, Virtual: sc.Virtual},
				args: []string{"bench", "pipeline", "--stages", strconv.Itoa(n), "--schedule", sc.Schedule, "--virtual", strconv.Itoa(sc.Virtual),
					"--microbatches", "8", "--batch", "32", "--steps", st}})
		}
	}
	type outcome struct {
		run                 validateRun
		pred                *plan.Prediction
		measured, stateMeas float64
	}
	var outs []outcome
	worstTok, worstMem := 0.0, 0.0
	for _, r := range runs {
		env := &plan.Env{Model: r.model, Device: dev, Fabric: fab, Cluster: plan.Cluster{Nodes: 1, ProcsPerNode: r.ranks}}
		pred, err := plan.Predict(env, r.layout)
		if err != nil {
			return fail(err)
		}
		line := fmt.Sprintf("validate: %v predicted tokens/s %.0f", r.layout, pred.TokensPerSec)
		if dry {
			fmt.Fprintf(stdout, "%s  # cohort %s\n", line, strings.Join(r.args, " "))
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		outb, err := exec.CommandContext(ctx, exe, r.args...).CombinedOutput()
		cancel()
		if err != nil {
			return fail(fmt.Errorf("cohort %s: %w\n%s", strings.Join(r.args, " "), err, tail(string(outb), 2000)))
		}
		o := outcome{run: r, pred: pred}
		if o.measured, o.stateMeas, err = parseBench(string(outb), r.args[1]); err != nil {
			return fail(fmt.Errorf("cohort %s: %w", strings.Join(r.args, " "), err))
		}
		rel := (pred.TokensPerSec - o.measured) / o.measured
		if math.Abs(rel) > math.Abs(worstTok) {
			worstTok = rel
		}
		line += fmt.Sprintf(" measured %.0f error %+.1f%%", o.measured, 100*rel)
		if o.stateMeas > 0 {
			// bench train's state-bytes/rank is the optimizer state
			mrel := (float64(pred.Memory.Optimizer) - o.stateMeas) / o.stateMeas
			if math.Abs(mrel) > math.Abs(worstMem) {
				worstMem = mrel
			}
			line += fmt.Sprintf(" optimizer-state/rank predicted %.2f measured %.2f MiB error %+.1f%%", float64(pred.Memory.Optimizer)/(1<<20), o.stateMeas/(1<<20), 100*mrel)
		}
		fmt.Fprintln(stdout, line)
		outs = append(outs, o)
	}
	if dry {
		return 0
	}
	fmt.Fprintf(stdout, "validate: worst tokens/s error %+.1f%% (aim 15%%), worst optimizer-state error %+.1f%% (aim 10%%)\n", 100*worstTok, 100*worstMem)
	for _, n := range ranks {
		var bestPred, bestMeas *outcome
		for i := range outs {
			o := &outs[i]
			if o.run.ranks != n {
				continue
			}
			if bestPred == nil || o.pred.TokensPerSec > bestPred.pred.TokensPerSec {
				bestPred = o
			}
			if bestMeas == nil || o.measured > bestMeas.measured {
				bestMeas = o
			}
		}
		if bestPred == nil {
			continue
		}
		fmt.Fprintf(stdout, "validate: %d ranks: the planner picks %v (measured %.0f), the measured best is %v (%.0f): within %.1f%%\n",
			n, bestPred.run.layout, bestPred.measured, bestMeas.run.layout, bestMeas.measured, 100*(1-bestPred.measured/bestMeas.measured))
	}
	return 0
}

// profileHere measures this machine as a device, as cohort plan profile
// does, from two traced GPT-mini pipeline runs of two stages: microbatches
// of 4 sequences (the validated pipelines') and of 32 (the data-parallel
// runs').
func profileHere(exe string, steps int, timeout time.Duration, stderr io.Writer) (*plan.Device, error) {
	m, _ := plan.NamedModel("gpt")
	dev := &plan.Device{Name: "this-machine", MemoryBytes: 8 << 30, MemoryBandwidth: 10e9,
		Source: "cohort plan validate: fp32 rates of whole layers measured from traced pipeline runs; memory figures not measured"}
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
		spans, err := readComputeSpans(tdir)
		if err != nil {
			return nil, err
		}
		ms, err := plan.Measure(m, run.batch/run.microbatches, spans)
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(stderr, "cohort plan validate: profiled microbatches of %d: %.3g FLOP/s\n", run.batch/run.microbatches, ms.Rate)
		plan.AddMeasurement(dev, "fp32", ms)
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

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}
