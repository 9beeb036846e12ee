// Command cohort is the command-line front end: `cohort run` launches
// workers (torchrun-compatible), `cohort bench …` measures kernels,
// collectives and training throughput, `cohort version` says what was
// built and which GEMM kernels this machine runs.
package main

import (
	"fmt"
	"os"
	"sort"
)

// command is one subcommand: it gets the arguments after its name and
// returns the process exit code.
type command struct {
	summary string
	run     func(args []string) int
}

func commands() map[string]command {
	return map[string]command{
		"run":     {"launch workers with torchrun's environment contract", runRun},
		"bench":   {"measure kernels, collectives and training throughput", runBench},
		"trace":   {"merge the ranks' COHORT_TRACE timelines into one (trace merge DIR)", runTrace},
		"k8s":     {"write Kubernetes manifests (PyTorchJob, Indexed Job, JobSet) for a job", runK8s},
		"plan":    {"predict every DP × PP × TP × shard layout's step time and memory, pick the best", runPlan},
		"version": {"the build (module version, VCS revision), Go, OS/arch and the GEMM kernels in use", runVersion},
		"doctor":  {"list the optional extras found here (OpenBLAS, MPI, …) and the tests that skip without them", runDoctor},
	}
}

// benchCommands lists `cohort bench` targets.
func benchCommands() map[string]command {
	return map[string]command{
		"gemm":          {"GFLOP/s of cohort's sgemm (and OpenBLAS when present)", benchGemm},
		"train":         {"training samples/s of the anchor workloads", benchTrain},
		"allreduce":     {"all-reduce latency and bandwidth across local processes", benchAllReduce},
		"broadcast":     {"broadcast latency and bandwidth across local processes", benchBroadcast},
		"allgather":     {"all-gather latency and bandwidth across local processes", benchAllGather},
		"reducescatter": {"reduce-scatter latency and bandwidth across local processes", benchReduceScatter},
		"pipeline":      {"pipeline-parallel GPT-mini tokens/s: schedule, stages, microbatches", benchPipeline},
	}
}

func main() { os.Exit(dispatch("cohort", os.Args[1:], commands())) }

func dispatch(prog string, args []string, cmds map[string]command) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(prog, cmds)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	if prog == "cohort" && (args[0] == "--version" || args[0] == "-version") {
		args[0] = "version"
	}
	c, ok := cmds[args[0]]
	if !ok {
		fmt.Fprintf(os.Stderr, "%s: unknown command %q\n", prog, args[0])
		usage(prog, cmds)
		return 2
	}
	return c.run(args[1:])
}

func usage(prog string, cmds map[string]command) {
	names := make([]string, 0, len(cmds))
	for n := range cmds {
		names = append(names, n)
	}
	sort.Strings(names)
	fmt.Fprintf(os.Stderr, "usage: %s COMMAND [ARGS]\n\ncommands:\n", prog)
	for _, n := range names {
		fmt.Fprintf(os.Stderr, "  %-14s %s\n", n, cmds[n].summary)
	}
}

func runBench(args []string) int { return dispatch("cohort bench", args, benchCommands()) }
