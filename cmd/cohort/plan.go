package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/cohortml/cohort/plan"
)

const planUsage = `usage: cohort plan --model gpt|gpt2|mlp | --model-config FILE --nodes N --procs-per-node P
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

// runPlan is `cohort plan`.
func runPlan(args []string) int {
	return planMain(args, os.Stdout, os.Stderr, os.ReadFile)
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
