package bench

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/cohortml/cohort/bench/collbench"
	"github.com/cohortml/cohort/plan"
)

const fitUsage = `usage: cohort plan fit [--intra shm] [--inter tcp] [--world 2] [--sizes 4KiB,…,64MiB]
                       [--ops allreduce,allgather,reducescatter,broadcast] [--budget 1s]
                       [--intra-results FILE] [--inter-results FILE] [--base NAME|FILE]
                       [--stat median|min] [--name NAME] [--save FILE] [-o FILE]

Fits a fabric (the α–β file cohort plan --fabric reads) to collective
benchmarks: for each link class, intra-node and inter-node, it runs
cohort bench OP --world N --transport T over the sizes for every OP (or
reads the saved results of runs made elsewhere: --json files, or the
output of workers started across hosts by cohort run, whose rank 0
prints "result {json}" lines), fits α (seconds per step) and β (bytes/s)
per collective by least squares on the relative error of

  time = α·steps + bytes·factor/β

with the ring's steps and byte factor that cohort plan prices them with
(all-reduce 2(n−1) and 2(n−1)/n; all-gather and reduce-scatter (n−1) and
(n−1)/n; a broadcast on 2 ranks is one p2p message, 1 and 1), prints
each fit with every size's residual (predicted − measured, relative) to
standard error and writes the fabric: the class's link is its
all-reduce fit, the other collectives' fits override it for them.

Run here, --inter tcp measures loopback TCP (the local fabric's
convention); between hosts, start the workers on every host with cohort
run and pass their output with --inter-results (bench/plan_netns.sh does
so across network namespaces). --intra "" or --inter "" skips a class;
its figures then come from --base (default local).

flags:
`

// Fit runs `cohort plan fit` with args; exe is the cohort executable whose
// `bench OP` it runs (unused when every class reads saved results).
func Fit(exe string, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("cohort plan fit", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, fitUsage)
		fs.PrintDefaults()
	}
	var (
		intra, inter, sizes, ops, intraRes, interRes, base, name, save, out string
		stat                                                                string
		world                                                               int
		budget, timeout                                                     time.Duration
	)
	fs.StringVar(&intra, "intra", "shm", "transport to measure as the intra-node class (\"\": none)")
	fs.StringVar(&inter, "inter", "tcp", "transport to measure as the inter-node class (\"\": none)")
	fs.IntVar(&world, "world", 2, "ranks of each benchmark run here")
	fs.StringVar(&sizes, "sizes", "4KiB,64KiB,1MiB,4MiB,16MiB,64MiB", "message sizes")
	fs.StringVar(&ops, "ops", "allreduce,allgather,reducescatter,broadcast", "collectives to fit (broadcast only on 2 ranks: p2p)")
	fs.DurationVar(&budget, "budget", time.Second, "timed loop per size (cohort bench --budget)")
	fs.DurationVar(&timeout, "timeout", 10*time.Minute, "bound on each benchmark run")
	fs.StringVar(&intraRes, "intra-results", "", "saved results for the intra-node class, comma-separated files (instead of running)")
	fs.StringVar(&interRes, "inter-results", "", "saved results for the inter-node class, comma-separated files (instead of running)")
	fs.StringVar(&base, "base", "local", "fabric for a class neither measured nor read (a name or a file)")
	fs.StringVar(&name, "name", "fitted", "the fabric's name")
	fs.StringVar(&save, "save", "", "append the results measured here as JSON lines to this file")
	fs.StringVar(&stat, "stat", "median", "which time of each size to fit: median (what cohort bench reports) or min (the fastest iteration: the link without the other load of a shared machine)")
	fs.StringVar(&out, "o", "", "write the fabric here (default: standard output)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	fail := func(err error) int {
		fmt.Fprintln(stderr, "cohort plan fit:", err)
		return 1
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "cohort plan fit: unexpected arguments %q\n", fs.Args())
		return 2
	}
	if stat != "median" && stat != "min" {
		return fail(fmt.Errorf("--stat %q: want median or min", stat))
	}
	szs, err := collbench.ParseSizes(sizes)
	if err != nil {
		return fail(fmt.Errorf("--sizes: %w", err))
	}
	var opList []string
	for _, op := range strings.Split(ops, ",") {
		op = strings.TrimSpace(op)
		switch {
		case op == "":
		case op == "broadcast" && world != 2 && (intraRes == "" || interRes == ""):
			fmt.Fprintf(stderr, "cohort plan fit: skipping broadcast: on %d ranks it is not one p2p message\n", world)
		case op == "allreduce", op == "allgather", op == "reducescatter", op == "broadcast":
			opList = append(opList, op)
		default:
			return fail(fmt.Errorf("--ops: %q: want allreduce, allgather, reducescatter or broadcast", op))
		}
	}
	// class returns one link class's fit: from the saved files, or from
	// benchmark runs over transport, or nil when neither is given.
	class := func(label, transport, files string) (*plan.ClassFit, error) {
		var res []collbench.Result
		switch {
		case files != "":
			for _, path := range strings.Split(files, ",") {
				f, err := os.Open(path)
				if err != nil {
					return nil, err
				}
				rs, err := collbench.ReadSaved(f)
				f.Close()
				if err != nil {
					return nil, fmt.Errorf("%s: %w", path, err)
				}
				for _, r := range rs {
					// A file may hold several transports' runs: keep --intra's or --inter's.
					if transport == "" || transport == "auto" || r.Transport == transport {
						res = append(res, r)
					}
				}
			}
			if len(res) == 0 {
				return nil, fmt.Errorf("--%s-results %s: no benchmark results in it (of transport %q)", label, files, transport)
			}
			if transport == "" || transport == "auto" {
				transport = res[0].Transport
			}
		case transport != "":
			for _, op := range opList {
				cfg := collbench.Config{Op: op, World: world, Transport: transport, Backend: "native", Sizes: szs, Budget: budget, Repeats: 1, Timeout: timeout}
				fmt.Fprintf(stderr, "cohort plan fit: %s: cohort bench %s --world %d --transport %s\n", label, op, world, transport)
				rs, err := collbench.Spawn(context.Background(), cfg, []string{exe, "bench", op}, stderr)
				if err != nil {
					return nil, fmt.Errorf("cohort bench %s --transport %s: %w", op, transport, err)
				}
				res = append(res, rs...)
			}
			if save != "" {
				if err := collbench.AppendJSON(save, res); err != nil {
					return nil, err
				}
			}
		default:
			return nil, nil
		}
		var samples []plan.Sample
		for _, r := range res {
			if !r.OK {
				return nil, fmt.Errorf("%s %s at %d bytes: the result check failed", label, r.Op, r.Bytes)
			}
			if r.Op == "broadcast" && r.World != 2 {
				continue
			}
			sec := r.TimeS
			if stat == "min" {
				sec = r.MinS
			}
			samples = append(samples, plan.Sample{Op: r.Op, World: r.World, Bytes: float64(r.Bytes), Seconds: sec})
		}
		fits, err := plan.FitClass(samples)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", label, err)
		}
		cf := &plan.ClassFit{Transport: transport, Fits: fits}
		for _, f := range fits {
			fmt.Fprint(stderr, f.Report(label, transport))
		}
		return cf, nil
	}
	ci, err := class("intra", intra, intraRes)
	if err != nil {
		return fail(err)
	}
	ce, err := class("inter", inter, interRes)
	if err != nil {
		return fail(err)
	}
	var b *plan.Fabric
	if ci == nil || ce == nil {
		if b, err = plan.LoadFabric(base, os.ReadFile); err != nil {
			return fail(err)
		}
	}
	fab, err := plan.FabricFromFits(name, ci, ce, b)
	if err != nil {
		return fail(err)
	}
	data, err := json.MarshalIndent(fab, "", "  ")
	if err != nil {
		return fail(err)
	}
	data = append(data, '\n')
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
