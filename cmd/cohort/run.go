package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"cohort/dist/rendezvous"
	"cohort/launch"
)

const runUsage = `usage: cohort run [flags] [--] PROGRAM|GO-PACKAGE [ARGS...]

Starts --nproc-per-node workers of PROGRAM (an executable, or a Go package
such as ./examples/mnist, built once) with torchrun's environment (RANK,
LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT, ...)
plus COHORT_NUM_THREADS, COHORT_TOKEN and COHORT_STORE_ADDR. Output is
prefixed "[rank N] ". If a worker fails the others are stopped and cohort
run exits non-zero naming it. Under srun (one task per node) or in a
Kubeflow PyTorchJob, --nnodes, --node-rank, --master-addr and
--master-port default to what the cluster says. Multi-node jobs need
COHORT_TOKEN set to the same secret on every node.

flags:
`

// runFlags are the parsed command line of `cohort run`.
type runFlags struct {
	cfg     launch.Config
	verbose bool
}

// parseRunArgs turns the command line (and, for defaults, the cluster's
// environment read through getenv) into a launch configuration.
func parseRunArgs(args []string, getenv func(string) string, usageOut io.Writer) (runFlags, error) {
	node, err := rendezvous.NodeFromEnv(getenv)
	if err != nil {
		return runFlags{}, err
	}
	fs := flag.NewFlagSet("cohort run", flag.ContinueOnError)
	fs.SetOutput(usageOut)
	fs.Usage = func() {
		fmt.Fprint(usageOut, runUsage)
		fs.PrintDefaults()
	}
	var (
		nproc, nnodes, nodeRank, masterPort, maxRestarts int
		masterAddr, runID                                string
		grace, joinTimeout                               time.Duration
		standalone, verbose                              bool
	)
	// torchrun spells its flags with underscores too; accept both.
	intFlag := func(p *int, name, alt string, def int, usage string) {
		fs.IntVar(p, name, def, usage)
		fs.IntVar(p, alt, def, "same as --"+name)
	}
	strFlag := func(p *string, name, alt, def, usage string) {
		fs.StringVar(p, name, def, usage)
		fs.StringVar(p, alt, def, "same as --"+name)
	}
	intFlag(&nproc, "nproc-per-node", "nproc_per_node", 1, "workers on this node")
	fs.IntVar(&nnodes, "nnodes", max(node.NumNodes, 1), "number of nodes")
	intFlag(&nodeRank, "node-rank", "node_rank", node.NodeRank, "this node's index, 0..nnodes-1")
	strFlag(&masterAddr, "master-addr", "master_addr", node.MasterAddr, "node 0's address (default 127.0.0.1 on one node)")
	intFlag(&masterPort, "master-port", "master_port", node.MasterPort, "port of the job's store on node 0 (0: a free port, one node only)")
	strFlag(&runID, "run-id", "run_id", node.RunID, "job id passed to workers as COHORT_RUN_ID (default: random)")
	intFlag(&maxRestarts, "max-restarts", "max_restarts", 0, "restart the workers after a failure at most this many times (one node only)")
	fs.DurationVar(&grace, "grace-period", 5*time.Second, "time workers get to exit after SIGTERM before SIGKILL")
	fs.DurationVar(&joinTimeout, "join-timeout", 5*time.Minute, "how long to wait for every node's launcher")
	fs.BoolVar(&standalone, "standalone", false, "single node, free port (torchrun compatibility)")
	fs.BoolVar(&verbose, "verbose", false, "log the launcher's progress")
	if err := fs.Parse(args); err != nil {
		return runFlags{}, err
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return runFlags{}, errors.New("no program given")
	}
	if standalone {
		nnodes, nodeRank, masterPort = 1, 0, 0
		if masterAddr == node.MasterAddr {
			masterAddr = ""
		}
	}
	var policy launch.RestartPolicy
	if maxRestarts < 0 {
		return runFlags{}, fmt.Errorf("--max-restarts %d: want >= 0", maxRestarts)
	}
	if maxRestarts > 0 {
		policy = launch.MaxRestarts(maxRestarts)
	}
	return runFlags{
		cfg: launch.Config{
			NProcPerNode: nproc, NNodes: nnodes, NodeRank: nodeRank,
			MasterAddr: masterAddr, MasterPort: masterPort,
			Program: fs.Arg(0), Args: fs.Args()[1:],
			Token: node.Token, RunID: runID,
			GracePeriod: grace, JoinTimeout: joinTimeout, Restart: policy,
		},
		verbose: verbose,
	}, nil
}

// runRun is `cohort run`.
func runRun(args []string) int {
	rf, err := parseRunArgs(args, os.Getenv, os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "cohort run: %v\n", err)
		return 2
	}
	level := slog.LevelWarn
	if rf.verbose {
		level = slog.LevelInfo
	}
	cfg := rf.cfg
	cfg.Env = os.Environ()
	cfg.Stdout, cfg.Stderr = os.Stdout, os.Stderr
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	cfg.Signals = sigs

	err = launch.Run(context.Background(), cfg)
	var (
		we *launch.WorkerError
		se *launch.SignalError
	)
	switch {
	case err == nil:
		return 0
	case errors.As(err, &we):
		fmt.Fprintf(os.Stderr, "cohort run: %s", we.Report())
		return 1
	case errors.As(err, &se):
		fmt.Fprintf(os.Stderr, "cohort run: %v\n", err)
		return se.ExitCode()
	default:
		fmt.Fprintf(os.Stderr, "cohort run: %v\n", err)
		return 1
	}
}
