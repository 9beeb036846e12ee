package main

import (
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"

	"github.com/cohortml/cohort/bench"
	"github.com/cohortml/cohort/internal/cli"
	"github.com/cohortml/cohort/plan"
)

const planUsage = `usage: cohort plan profile …   (measure this machine as a device; cohort plan profile -h)
       cohort plan validate …  (predicted against measured on this machine; cohort plan validate -h)
       cohort plan fit …       (fit a fabric to collective benchmarks; cohort plan fit -h)
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
	if len(args) > 0 && args[0] == "tp-worker" { // a rank of validate's tensor-parallel profile
		return bench.TPWorker(args[1:])
	}
	if len(args) > 0 && (args[0] == "fit" || args[0] == "validate") {
		exe, err := os.Executable()
		if err != nil {
			fmt.Fprintf(os.Stderr, "cohort plan %s: %v\n", args[0], err)
			return 1
		}
		if args[0] == "fit" {
			return bench.Fit(exe, args[1:], os.Stdout, os.Stderr)
		}
		return bench.Validate(exe, args[1:], os.Stdout, os.Stderr)
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
make a curve); the output layer and loss get their own share of the
blocks' rate (the last stage's passes beyond its blocks). The memory
size is not measured (--memory-bytes). The bandwidth prices only the
optimizer step, since the measured curve covers the layers' elementwise
work: it is measured as the rate of each step's work outside the
pipeline (AdamW, clipping, the batch) per byte AdamW moves, unless
--memory-bandwidth gives it. The hand-off latency (handoff_seconds) is
the median time from a pass's end to the end of the receive waiting for
its output, less the fastest; with the baseline's trace beside the run's
(DIR/baseline, which cohort bench pipeline --trace writes), the passes'
time side by side against alone gives side_by_side, and the curve then
holds a rank's rate alone. With --device the run's figures replace the
device's: profile the microbatches of the pipelines to be predicted
last (sends of 1 MiB and more wait for the sender's next pause, so their
hand-offs are far longer).

flags:
`

func planProfile(args []string, stdout, stderr io.Writer) int {
	fs := cli.NewFlagSet("cohort plan profile", profileUsage, stderr)
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
	fs.Float64Var(&bandwidth, "memory-bandwidth", 0, "bytes/s of memory for the optimizer step (0: measured from the trace's steps)")
	fs.StringVar(&out, "o", "", "write the device here (default: standard output)")
	if status, ok := cli.Parse(fs, args); !ok {
		return status
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
	spans, err := bench.ComputeSpans(fs.Arg(0))
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
		if bandwidth == 0 {
			outside, err := bench.OutsideSeconds(fs.Arg(0))
			if err == nil {
				dev.MemoryBandwidth, err = plan.MeasureOptimizer(m, outside)
			}
			if err != nil {
				return fail(fmt.Errorf("measuring the optimizer step (or give --memory-bandwidth): %w", err))
			}
			dev.Source = "cohort plan profile: fp32 rates of whole layers, and memory_bandwidth as the rate of the step outside the pipeline, measured from pipeline traces; memory_bytes from a flag, not measured"
		}
	}
	// The hand-off latency and, with the baseline's trace beside the
	// run's, the side-by-side factor; the rate is then a rank's alone.
	if handoff, sb, err := bench.MeasurePipeline(fs.Arg(0)); err != nil {
		fmt.Fprintf(stderr, "cohort plan profile: no hand-off or side-by-side figures: %v\n", err)
	} else {
		dev.HandoffSeconds = math.Round(handoff*1e6) / 1e6
		ms.Rate *= sb.Ratio
		if sb.Ranks > 1 {
			plan.AddSideBySide(dev, sb.Ranks, sb.Factor)
		}
		fmt.Fprintf(stderr, "cohort plan profile: hand-off %.0f µs beyond the fastest; passes %.3f× their time alone, %.0f%% of it side by side: factor %.3f at %d ranks\n",
			handoff*1e6, sb.Ratio, 100*sb.Overlap, sb.Factor, sb.Ranks)
	}
	plan.AddMeasurement(dev, "fp32", ms)
	if err := dev.Validate(); err != nil {
		return fail(err)
	}
	fmt.Fprintf(stderr, "cohort plan profile: %s, %d stages, %d passes, microbatches of %d: %.3g FLOP/s at %.3g FLOPs per layer, the head at %.2f of it; optimizer %.3g bytes/s\n",
		m.Name, ms.Stages, ms.Passes, microbatch, ms.Rate, ms.GEMM, ms.Head, dev.MemoryBandwidth)
	if err := cli.WriteJSON(out, stdout, dev); err != nil {
		return fail(err)
	}
	return 0
}

func planMain(args []string, stdout, stderr io.Writer, readFile func(string) ([]byte, error)) int {
	fs := cli.NewFlagSet("cohort plan", planUsage, stderr)
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
	if status, ok := cli.ParseFlags(fs, args); !ok {
		return status
	}
	fail := func(err error) int {
		fmt.Fprintln(stderr, "cohort plan:", err)
		return 1
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
	if env.Device, err = plan.LoadDevice(device, readFile); err != nil {
		return fail(err)
	}
	if env.Fabric, err = plan.LoadFabric(fabric, readFile); err != nil {
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
