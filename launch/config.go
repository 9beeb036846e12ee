package launch

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"runtime"
	"time"
)

// Config describes one node's part of a job. The zero value of every
// optional field works; Program and NProcPerNode are required.
type Config struct {
	// NProcPerNode is the number of workers on this node (>= 1).
	NProcPerNode int
	// NNodes is the number of nodes (0 means 1); NodeRank is this node's
	// index. Ranks are assigned node by node: rank = NodeRank·NProcPerNode
	// + local rank, as torchrun does. Every node must use the same
	// NProcPerNode (checked when the nodes join).
	NNodes, NodeRank int
	// MasterAddr and MasterPort locate node 0, whose launcher serves the
	// job's store there. On a single node MasterAddr defaults to 127.0.0.1
	// and a MasterPort of 0 picks a free port; with several nodes both are
	// required.
	MasterAddr string
	MasterPort int

	// Program is an executable or a Go package (see Run); Args are passed
	// to it unchanged.
	Program string
	Args    []string
	// Dir is the working directory of the build and of the workers;
	// "" means the launcher's.
	Dir string
	// Env is the workers' base environment, usually os.Environ(); the
	// launcher's variables replace entries of the same name.
	Env []string

	// Token is the store's shared secret, passed to the workers as
	// COHORT_TOKEN. Empty on a single node: a random one per job. With
	// several nodes it is required and must be the same on every node.
	Token string
	// RunID names the job (COHORT_RUN_ID). Empty: node 0 makes a random
	// one and the other nodes adopt it.
	RunID string

	// NumCPU is the cores available to this node's workers; 0 means
	// runtime.NumCPU(). Each worker gets COHORT_NUM_THREADS =
	// max(1, NumCPU / NProcPerNode).
	NumCPU int
	// CPUBind binds each worker to its share of the node's CPUs (see
	// BindAuto, the default). A bound worker gets GOMAXPROCS set to the
	// launcher's, what it would have had unbound, unless Env sets it.
	CPUBind CPUBind
	// GracePeriod is how long workers may take to exit after SIGTERM (or a
	// forwarded signal) before they are killed; 0 means 30 s, Kubernetes'
	// terminationGracePeriodSeconds: time for a worker that stops
	// gracefully (distributed.Stopper) to finish its step and save.
	GracePeriod time.Duration
	// JoinTimeout bounds the wait for every node's launcher to join;
	// 0 means 5 min.
	JoinTimeout time.Duration
	// ExitBarrierTimeout bounds how long a launcher whose workers are done
	// waits for the other nodes' launchers (node 0 keeps serving the store
	// meanwhile); 0 means 5 min.
	ExitBarrierTimeout time.Duration
	// Restart decides whether a failure restarts the workers; nil never
	// restarts. It serves fixed-size jobs on a single node; an elastic job
	// counts restarts with Elastic.MaxRestarts instead.
	Restart RestartPolicy
	// Elastic, when its Endpoint is set, makes the job elastic: nodes
	// meet in rounds through the store at Endpoint (see elastic.go), and
	// NNodes, NodeRank, MasterAddr, MasterPort and Restart must be left
	// zero.
	Elastic Elastic

	// Stdout and Stderr receive the workers' output, line by line, each
	// line prefixed with "[rank N] "; nil discards.
	Stdout, Stderr io.Writer
	// TailLines is how many of a failed worker's last stderr lines
	// WorkerError keeps; 0 means 20.
	TailLines int
	// Signals, if not nil, delivers signals received by the launcher; each
	// is forwarded to every worker's process group, the first one starts
	// the grace period and a second one kills the workers.
	Signals <-chan os.Signal
	// LogDir, when set, keeps each worker's output in files, as
	// torchrun's --log-dir: LogDir/RUN_ID/attempt_K/RANK/stdout.log and
	// stderr.log (K counts restarts; an elastic job's directories are
	// round_K), beside error.json, the worker's TORCHELASTIC_ERROR_FILE.
	// The output then goes to the files only, unless Tee.
	LogDir string
	// Tee, with LogDir, also streams the output to Stdout and Stderr.
	Tee bool
	// Timeout, when > 0, is passed to the workers as COHORT_TIMEOUT: it
	// bounds their joining the job and every collective op
	// (distributed.InitFromEnv), so a rank that never arrives is named when it
	// ends instead of after 30 minutes.
	Timeout time.Duration
	// Watchdog, when not 0, is passed as COHORT_WATCHDOG: the interval
	// after which the workers' hang watchdog reports a stuck collective;
	// negative turns it off.
	Watchdog time.Duration
	// Dashboard, when set, is passed as COHORT_DASHBOARD: the address
	// (host:port) where rank 0 serves the live run page.
	Dashboard string

	// Logger receives the launcher's progress and the store server's
	// log; nil discards.
	Logger *slog.Logger
	// GoCommand is the go tool used to build a package; "" means "go".
	GoCommand string
}

// RestartPolicy decides, after a worker failure, whether to restart every
// worker of the node. restarts is how many restarts happened already.
type RestartPolicy func(failure *WorkerError, restarts int) bool

// MaxRestarts restarts the workers after each failure, at most n times.
func MaxRestarts(n int) RestartPolicy {
	return func(_ *WorkerError, restarts int) bool { return restarts < n }
}

func (c *Config) validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if c.Program == "" {
		bad("no program to run")
	}
	if c.NProcPerNode < 1 {
		bad("--nproc-per-node %d: want >= 1", c.NProcPerNode)
	}
	if c.NNodes < 0 {
		bad("--nnodes %d: want >= 1", c.NNodes)
	}
	nnodes := max(c.NNodes, 1)
	if c.NodeRank < 0 || c.NodeRank >= nnodes {
		bad("--node-rank %d with %d nodes: want 0..%d", c.NodeRank, nnodes, nnodes-1)
	}
	if c.MasterPort < 0 || c.MasterPort > 65535 {
		bad("--master-port %d: want a TCP port, 1..65535 (or 0 for a free one on a single node)", c.MasterPort)
	}
	if nnodes > 1 {
		if c.MasterAddr == "" {
			bad("--master-addr is required with %d nodes: every node must reach node 0", nnodes)
		}
		if c.MasterPort == 0 {
			bad("--master-port is required with %d nodes: every node must use the same port", nnodes)
		}
		if c.Token == "" {
			bad("COHORT_TOKEN must be set, to the same secret on every node, with %d nodes", nnodes)
		}
		if c.Restart != nil {
			bad("restarts of a fixed-size job are supported on a single node only, not with %d nodes: use an elastic job (--nnodes MIN:MAX --rdzv-endpoint)", nnodes)
		}
	}
	if c.Elastic.Endpoint != "" {
		if err := c.Elastic.validate(); err != nil {
			errs = append(errs, err)
		}
		if c.NNodes > 1 || c.NodeRank != 0 || c.MasterPort != 0 || c.Restart != nil {
			bad("an elastic job (--rdzv-endpoint) assigns node ranks itself: leave --nnodes N, --node-rank, --master-port and the restart policy unset")
		}
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"GracePeriod", c.GracePeriod}, {"JoinTimeout", c.JoinTimeout}, {"ExitBarrierTimeout", c.ExitBarrierTimeout}} {
		if d.v < 0 {
			bad("%s %v: want >= 0", d.name, d.v)
		}
	}
	if c.Timeout < 0 {
		bad("--timeout %v: want > 0 (or 0 for the workers' default)", c.Timeout)
	}
	if c.Tee && c.LogDir == "" {
		bad("--tee copies the output to the console and to the files of --log-dir: give --log-dir")
	}
	if _, err := ParseCPUBind(string(c.CPUBind)); err != nil {
		bad("CPUBind %q: want auto or none", c.CPUBind)
	}
	if c.NumCPU < 0 || c.TailLines < 0 {
		bad("NumCPU %d, TailLines %d: want >= 0", c.NumCPU, c.TailLines)
	}
	if len(errs) > 0 {
		return fmt.Errorf("launch: %w", errors.Join(errs...))
	}
	return nil
}

// withDefaults returns a copy with every zero optional field filled in.
func (c Config) withDefaults() Config {
	c.NNodes = max(c.NNodes, 1)
	if c.MasterAddr == "" {
		c.MasterAddr = "127.0.0.1"
	}
	if c.NumCPU == 0 {
		c.NumCPU = CPUs()
	}
	if c.GracePeriod == 0 {
		c.GracePeriod = 30 * time.Second
	}
	if c.JoinTimeout == 0 {
		c.JoinTimeout = 5 * time.Minute
	}
	if c.ExitBarrierTimeout == 0 {
		c.ExitBarrierTimeout = 5 * time.Minute
	}
	if c.Stdout == nil {
		c.Stdout = io.Discard
	}
	if c.Stderr == nil {
		c.Stderr = io.Discard
	}
	if c.TailLines == 0 {
		c.TailLines = 20
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.GoCommand == "" {
		c.GoCommand = "go"
	}
	if c.Elastic.Endpoint != "" {
		c.Elastic = c.Elastic.withDefaults()
	}
	return c
}

// HostMode says whether an elastic agent serves the rendezvous store.
type HostMode int

const (
	// HostAuto serves the store when the endpoint's host is this machine
	// (a loopback address, one of its interface addresses or its host
	// name) and the port is free; otherwise dials it.
	HostAuto HostMode = iota
	// HostYes always serves the store (torchrun's is_host=true).
	HostYes
	// HostNo never serves it.
	HostNo
)

// Elastic configures an elastic job (torchrun's c10d rendezvous). The zero
// value of every field but Endpoint works.
type Elastic struct {
	// Endpoint is the rendezvous store's host:port (--rdzv-endpoint).
	Endpoint string
	// ID names the job in the store (--rdzv-id); "" means "default".
	ID string
	// MinNodes and MaxNodes bound the nodes of a round (--nnodes MIN:MAX);
	// 0 means 1 and MinNodes.
	MinNodes, MaxNodes int
	// MaxRestarts is how many worker failures the job survives
	// (--max-restarts); scale events are not counted.
	MaxRestarts int
	// Host says whether this agent serves the store.
	Host HostMode
	// KeepAliveInterval is how often an agent heartbeats; 0 means 5 s.
	KeepAliveInterval time.Duration
	// KeepAliveMaxAttempt: a node whose heartbeat was not seen for
	// KeepAliveInterval × KeepAliveMaxAttempt is dead; 0 means 3 (15 s
	// with the default interval, as torchrun). While a round is open
	// (after a failure, a leave or a join), a node the round expects that
	// has not joined is left out of it once its heartbeat was not seen for
	// KeepAliveInterval + 1 s: a live agent beats within the interval and
	// joins within MonitorInterval, so the survivors of a lost node resume
	// within about that much (it may join again later).
	KeepAliveMaxAttempt int
	// LastCallTimeout is how long a round with MinNodes ≤ nodes < MaxNodes
	// stays open for more nodes; 0 means 30 s. Rounds after the first close
	// without it as soon as every node they expect has joined.
	LastCallTimeout time.Duration
	// MonitorInterval is how often the agent reads the rendezvous state;
	// 0 means 250 ms.
	MonitorInterval time.Duration
}

func (e *Elastic) validate() error {
	var errs []error
	if _, _, err := net.SplitHostPort(e.Endpoint); err != nil {
		errs = append(errs, fmt.Errorf("--rdzv-endpoint %q: want HOST:PORT: %w", e.Endpoint, err))
	}
	if e.MinNodes < 0 || e.MaxNodes < 0 || (e.MaxNodes > 0 && e.MaxNodes < max(e.MinNodes, 1)) {
		errs = append(errs, fmt.Errorf("--nnodes %d:%d: want 1 <= MIN <= MAX", e.MinNodes, e.MaxNodes))
	}
	if e.MaxRestarts < 0 || e.KeepAliveMaxAttempt < 0 || e.KeepAliveInterval < 0 || e.LastCallTimeout < 0 || e.MonitorInterval < 0 {
		errs = append(errs, fmt.Errorf("--max-restarts and the rendezvous timeouts must be >= 0"))
	}
	return errors.Join(errs...)
}

func (e Elastic) withDefaults() Elastic {
	e.MinNodes = max(e.MinNodes, 1)
	if e.MaxNodes == 0 {
		e.MaxNodes = e.MinNodes
	}
	if e.ID == "" {
		e.ID = "default"
	}
	if e.KeepAliveInterval == 0 {
		e.KeepAliveInterval = 5 * time.Second
	}
	if e.KeepAliveMaxAttempt == 0 {
		e.KeepAliveMaxAttempt = 3
	}
	if e.LastCallTimeout == 0 {
		e.LastCallTimeout = 30 * time.Second
	}
	if e.MonitorInterval == 0 {
		e.MonitorInterval = 250 * time.Millisecond
	}
	return e
}

// WorldSize is the number of workers in the job.
func (c *Config) WorldSize() int { return max(c.NNodes, 1) * c.NProcPerNode }

// CPUs is the number of CPUs this process may run on (its affinity mask,
// read at start-up): Config.NumCPU's default, and the bound cohort run
// puts on --nproc-per-node unless --oversubscribe.
func CPUs() int { return runtime.NumCPU() }
