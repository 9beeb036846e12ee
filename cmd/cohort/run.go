package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/cohortml/cohort/device/cuda"
	"github.com/cohortml/cohort/distributed/rendezvous"
	"github.com/cohortml/cohort/internal/cli"
	"github.com/cohortml/cohort/launch"
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

The rank blamed for a failure is the one whose failure began first (a
worker stopped by a signal is named with it); its error file
(TORCHELASTIC_ERROR_FILE) is part of the report. --timeout bounds the
workers' joining and collectives (COHORT_TIMEOUT), --log-dir keeps each
rank's output in files (--tee: on the console too), --watchdog and
--dashboard set COHORT_WATCHDOG and COHORT_DASHBOARD.

SIGINT and SIGTERM are forwarded to the workers, at any moment (start-up
included); they get --stop-timeout to finish their step, save and exit
before SIGKILL, and the report says how each ended. A second signal kills
them at once. More workers than this node's CPUs need --oversubscribe.

GPUs: --nproc-per-node gpu starts one worker per GPU visible to the
launcher (CUDA_VISIBLE_DEVICES applies); worker LOCAL_RANK i uses GPU i:
a program's -device cuda opens it, and the nccl backend (Init's choice
for a CUDA device) runs on it.

Elastic jobs (torchrun's c10d rendezvous): --nnodes MIN:MAX with
--rdzv-endpoint HOST:PORT (the agent on HOST serves the rendezvous store
there) and --rdzv-id. Nodes meet in rounds; ranks are assigned per round;
a failed worker restarts every node's workers (at most --max-restarts
times); a node that leaves, dies (no heartbeat) or joins starts a new
round at the new world size without counting as a restart. Workers get
COHORT_RESTART_COUNT (TORCHELASTIC_RESTART_COUNT) and resume from their
own checkpoints.

flags:
`

// runFlags are the parsed command line of `cohort run`.
type runFlags struct {
	cfg     launch.Config
	verbose bool
	// resolveMaster: MasterAddr came with Slurm and may be a node name
	// that is not in DNS (see rendezvous.Resolver).
	resolveMaster bool
}

// parseRunArgs turns the command line (and, for defaults, the cluster's
// environment read through getenv) into a launch configuration.
func parseRunArgs(args []string, getenv func(string) string, usageOut io.Writer) (runFlags, error) {
	return parseRunArgsGPUs(args, getenv, usageOut, cuda.Visible)
}

// parseRunArgsGPUs is parseRunArgs with the count of this node's visible
// GPUs injected (for --nproc-per-node gpu and auto).
func parseRunArgsGPUs(args []string, getenv func(string) string, usageOut io.Writer, gpus func() (int, error)) (runFlags, error) {
	node, err := rendezvous.NodeFromEnv(getenv)
	if err != nil {
		return runFlags{}, err
	}
	fs := cli.NewFlagSet("cohort run", runUsage, usageOut)
	var (
		nodeRank, masterPort, maxRestarts    int
		nnodes, masterAddr, runID            string
		nprocFlag                            = launch.NProc("1")
		rdzvEndpoint, rdzvID, rdzvBackend    string
		rdzvConf                             string
		grace, joinTimeout, timeout          time.Duration
		standalone, verbose, oversubscribe   bool
		logDir, watchdog, dashboard, cpuBind string
		tee                                  teeFlag
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
	fs.Var(&nprocFlag, "nproc-per-node", "workers on this node: N, gpu (one per visible GPU: LOCAL_RANK i uses GPU i, and -device cuda opens it), cpu (one per CPU) or auto (gpu if there are GPUs, else 1)")
	fs.Var(&nprocFlag, "nproc_per_node", "same as --nproc-per-node")
	defNodes := strconv.Itoa(max(node.NumNodes, 1))
	if node.MaxNodes > 0 {
		defNodes = fmt.Sprintf("%d:%d", node.MinNodes, node.MaxNodes)
	}
	fs.StringVar(&nnodes, "nnodes", defNodes, "number of nodes, or MIN:MAX for an elastic job")
	intFlag(&nodeRank, "node-rank", "node_rank", node.NodeRank, "this node's index, 0..nnodes-1")
	strFlag(&masterAddr, "master-addr", "master_addr", node.MasterAddr, "node 0's address (default 127.0.0.1 on one node)")
	intFlag(&masterPort, "master-port", "master_port", node.MasterPort, "port of the job's store on node 0 (0: a free port, one node only)")
	strFlag(&runID, "run-id", "run_id", node.RunID, "job id passed to workers as COHORT_RUN_ID (default: random)")
	intFlag(&maxRestarts, "max-restarts", "max_restarts", 0, "restart the workers after a failure at most this many times (one node, or an elastic job)")
	strFlag(&rdzvEndpoint, "rdzv-endpoint", "rdzv_endpoint", node.RdzvEndpoint, "elastic: HOST:PORT of the rendezvous store (served by the agent on HOST)")
	strFlag(&rdzvID, "rdzv-id", "rdzv_id", node.RdzvID, "elastic: the job's id at the rendezvous (default \"default\")")
	strFlag(&rdzvBackend, "rdzv-backend", "rdzv_backend", "", "c10d (elastic, the default with --rdzv-endpoint) or static")
	strFlag(&rdzvConf, "rdzv-conf", "rdzv_conf", "", "elastic: KEY=VALUE,…: join_timeout, last_call_timeout, keep_alive_interval (seconds or durations), keep_alive_max_attempt, is_host")
	fs.DurationVar(&grace, "stop-timeout", 30*time.Second, "time workers get to finish their step, save and exit after a signal before SIGKILL (Kubernetes' terminationGracePeriodSeconds)")
	fs.DurationVar(&grace, "grace-period", 30*time.Second, "same as --stop-timeout")
	fs.BoolVar(&oversubscribe, "oversubscribe", false, "allow more workers than this node's CPUs")
	fs.DurationVar(&joinTimeout, "join-timeout", 5*time.Minute, "how long to wait for every node's launcher")
	fs.DurationVar(&timeout, "timeout", 0, "bound on the workers' joining and on every collective op (COHORT_TIMEOUT); 0: the workers' default (30m)")
	strFlag(&logDir, "log-dir", "log_dir", "", "keep each rank's output in DIR/RUN_ID/attempt_K/RANK/{stdout,stderr}.log (and its error.json) instead of the console")
	fs.Var(&tee, "tee", "with --log-dir, also copy the output to the console (torchrun's --tee 3)")
	fs.StringVar(&watchdog, "watchdog", "", "the workers' hang watchdog interval, e.g. 60s, or off (COHORT_WATCHDOG)")
	fs.StringVar(&dashboard, "dashboard", "", "HOST:PORT where rank 0 serves the live run page (COHORT_DASHBOARD)")
	fs.StringVar(&cpuBind, "cpu-bind", "auto", "auto: bind each worker to its own block of this node's CPUs when they are at least as many as the workers (GOMAXPROCS kept at the launcher's); none: never bind")
	fs.BoolVar(&standalone, "standalone", false, "single node, free port (torchrun compatibility)")
	fs.BoolVar(&verbose, "verbose", false, "log the launcher's progress")
	if err := fs.Parse(args); err != nil {
		return runFlags{}, err
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return runFlags{}, errors.New("no program given")
	}
	nproc, err := nprocFlag.Workers(gpus)
	if err != nil {
		return runFlags{}, err
	}
	if cpus := launch.CPUs(); nproc > cpus && !oversubscribe {
		return runFlags{}, fmt.Errorf("--nproc-per-node %d: more workers than the %d CPUs this node gives the launcher; give --oversubscribe to run them anyway", nproc, cpus)
	}
	minNodes, maxNodes, err := parseNNodes(nnodes)
	if err != nil {
		return runFlags{}, err
	}
	if maxRestarts < 0 {
		return runFlags{}, fmt.Errorf("--max-restarts %d: want >= 0", maxRestarts)
	}
	if timeout < 0 {
		return runFlags{}, fmt.Errorf("--timeout %v: want > 0", timeout)
	}
	wd, err := parseWatchdog(watchdog)
	if err != nil {
		return runFlags{}, err
	}
	if err := checkDashboard(dashboard); err != nil {
		return runFlags{}, err
	}
	bind, err := launch.ParseCPUBind(cpuBind)
	if err != nil {
		return runFlags{}, err
	}
	if tee && logDir == "" {
		return runFlags{}, errors.New("--tee copies the workers' output to the console and to --log-dir's files: give --log-dir")
	}
	cfg := launch.Config{
		NProcPerNode: nproc, Program: fs.Arg(0), Args: fs.Args()[1:],
		Token: node.Token, RunID: runID, GracePeriod: grace, JoinTimeout: joinTimeout,
		Timeout: timeout, LogDir: logDir, Tee: bool(tee), Watchdog: wd, Dashboard: dashboard, CPUBind: bind,
	}
	switch rdzvBackend {
	case "", "c10d", "static":
	default:
		return runFlags{}, fmt.Errorf("--rdzv-backend %q: want c10d or static", rdzvBackend)
	}
	elastic := rdzvBackend != "static" && (rdzvEndpoint != "" || minNodes != maxNodes || rdzvBackend == "c10d")
	if elastic && !standalone {
		if rdzvEndpoint == "" {
			if masterAddr == "" || masterPort == 0 {
				return runFlags{}, fmt.Errorf("--nnodes %s is an elastic job: give --rdzv-endpoint HOST:PORT (the host serving the rendezvous)", nnodes)
			}
			rdzvEndpoint = net.JoinHostPort(masterAddr, strconv.Itoa(masterPort))
		}
		cfg.Elastic = launch.Elastic{Endpoint: rdzvEndpoint, ID: rdzvID, MinNodes: minNodes, MaxNodes: maxNodes, MaxRestarts: maxRestarts}
		if err := parseRdzvConf(rdzvConf, &cfg); err != nil {
			return runFlags{}, err
		}
		return runFlags{cfg: cfg, verbose: verbose}, nil
	}
	if minNodes != maxNodes {
		return runFlags{}, fmt.Errorf("--nnodes %s: a node range needs an elastic job (not --standalone or --rdzv-backend static)", nnodes)
	}
	if standalone {
		minNodes, nodeRank, masterPort = 1, 0, 0
		if masterAddr == node.MasterAddr {
			masterAddr = ""
		}
	}
	cfg.NNodes, cfg.NodeRank, cfg.MasterAddr, cfg.MasterPort = minNodes, nodeRank, masterAddr, masterPort
	if maxRestarts > 0 {
		cfg.Restart = launch.MaxRestarts(maxRestarts)
	}
	return runFlags{cfg: cfg, verbose: verbose, resolveMaster: node.Source == rendezvous.Slurm && minNodes > 1 && masterAddr != ""}, nil
}

// parseWatchdog parses --watchdog: a duration, or off (0, off, false);
// "" leaves the workers' setting alone.
func parseWatchdog(v string) (time.Duration, error) {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "":
		return 0, nil
	case "0", "off", "false":
		return -1, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("--watchdog %q: want a duration such as 60s, or off", v)
	}
	return d, nil
}

// checkDashboard refuses a --dashboard that rank 0 could not listen on,
// before any worker starts (it failed in rank 0 after the data had loaded).
func checkDashboard(v string) error {
	if v == "" {
		return nil
	}
	_, port, err := net.SplitHostPort(v)
	if err == nil {
		var p uint64
		if p, err = strconv.ParseUint(port, 10, 16); err == nil && p == 0 && port != "0" {
			err = errors.New("bad port")
		}
	}
	if err != nil {
		return fmt.Errorf("--dashboard %q: want HOST:PORT or :PORT (port a number 0..65535): %v", v, err)
	}
	return nil
}

// teeFlag is --tee: a boolean that also takes torchrun's stream numbers
// (--tee=3 copies both streams; 0 none).
type teeFlag bool

func (f *teeFlag) String() string   { return strconv.FormatBool(bool(*f)) }
func (f *teeFlag) IsBoolFlag() bool { return true }
func (f *teeFlag) Set(v string) error {
	switch v {
	case "1", "2", "3", "t", "T", "true", "TRUE", "True":
		*f = true
	case "0", "f", "F", "false", "FALSE", "False":
		*f = false
	default:
		return fmt.Errorf("want true, false or torchrun's 0..3")
	}
	return nil
}

// parseNNodes parses --nnodes N or MIN:MAX.
func parseNNodes(v string) (minNodes, maxNodes int, err error) {
	if lo, hi, ok := strings.Cut(v, ":"); ok {
		minNodes, maxNodes, err = rendezvous.ParseNodeRange(lo, hi)
		if err != nil {
			return 0, 0, fmt.Errorf("--nnodes %s: %w", v, err)
		}
		return minNodes, maxNodes, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		return 0, 0, fmt.Errorf("--nnodes %q: want a node count >= 1 or MIN:MAX", v)
	}
	return n, n, nil
}

// parseRdzvConf applies torchrun's --rdzv-conf keys to an elastic job.
func parseRdzvConf(conf string, cfg *launch.Config) error {
	if conf == "" {
		return nil
	}
	for _, kv := range strings.Split(conf, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok {
			return fmt.Errorf("--rdzv-conf %q: want KEY=VALUE,…", kv)
		}
		dur := func() (time.Duration, error) {
			if s, err := strconv.ParseFloat(v, 64); err == nil {
				return time.Duration(s * float64(time.Second)), nil
			}
			d, err := time.ParseDuration(v)
			if err != nil {
				return 0, fmt.Errorf("--rdzv-conf %s=%q: want seconds or a duration", k, v)
			}
			return d, nil
		}
		var err error
		e := &cfg.Elastic
		switch k {
		case "join_timeout":
			cfg.JoinTimeout, err = dur()
		case "last_call_timeout":
			e.LastCallTimeout, err = dur()
		case "keep_alive_interval":
			e.KeepAliveInterval, err = dur()
		case "keep_alive_max_attempt":
			e.KeepAliveMaxAttempt, err = strconv.Atoi(v)
			if err != nil {
				err = fmt.Errorf("--rdzv-conf %s=%q: want an integer", k, v)
			}
		case "is_host":
			switch strings.ToLower(v) {
			case "1", "true", "yes":
				e.Host = launch.HostYes
			case "0", "false", "no":
				e.Host = launch.HostNo
			default:
				err = fmt.Errorf("--rdzv-conf is_host=%q: want true or false", v)
			}
		default:
			err = fmt.Errorf("--rdzv-conf: unknown key %q (want join_timeout, last_call_timeout, keep_alive_interval, keep_alive_max_attempt or is_host)", k)
		}
		if err != nil {
			return err
		}
	}
	return nil
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
	if rf.resolveMaster {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		addr, err := rendezvous.Resolver{}.Resolve(ctx, cfg.MasterAddr)
		cancel()
		if err != nil {
			fmt.Fprintf(os.Stderr, "cohort run: node 0 (where the job's store runs): %v\n", err)
			return 2
		}
		cfg.MasterAddr = addr
	}
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
		fmt.Fprintf(os.Stderr, "cohort run: %s", se.Report())
		return se.ExitCode()
	default:
		fmt.Fprintf(os.Stderr, "cohort run: %v\n", err)
		return 1
	}
}
