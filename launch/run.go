package launch

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/cohortml/cohort/distributed/rendezvous"
	"github.com/cohortml/cohort/distributed/store"
	"github.com/cohortml/cohort/distributed/store/tcpstore"
	"github.com/cohortml/cohort/internal/affinity"
)

// Run runs one node's part of a job: it resolves (and if needed builds)
// the program, serves the job's store on node 0, joins the other nodes'
// launchers, starts Config.NProcPerNode workers with torchrun's
// environment, streams their output, and supervises them until they all
// exit.
//
// It returns nil when every worker exited 0; a *WorkerError naming the
// first worker that failed (after stopping the others: SIGTERM, then
// SIGKILL after the grace period); a *RemoteError when a failure on
// another node stopped this one; a *SignalError when a signal from
// Config.Signals stopped the job; an error wrapping ctx's error when ctx
// ended; or a configuration, build or rendezvous error. Every worker
// process group is killed before Run returns, whatever happened.
func Run(ctx context.Context, cfg Config) error {
	if err := cfg.validate(); err != nil {
		return err
	}
	c := cfg.withDefaults()
	a := &agent{cfg: c, log: c.Logger, out: &lineWriter{w: c.Stdout}, errOut: &lineWriter{w: c.Stderr}}
	if c.LogDir != "" && !c.Tee {
		a.out, a.errOut = nil, nil // the workers' output goes to the files only
	}
	defer a.cleanup()
	if c.Elastic.Endpoint != "" {
		return a.runElastic(ctx)
	}
	if err := a.prepareInterruptibly(ctx); err != nil {
		return err
	}
	return a.supervise(ctx)
}

// prepareInterruptibly runs prepare (a build, a join that may wait for
// other nodes) so that a signal from Config.Signals aborts it.
func (a *agent) prepareInterruptibly(ctx context.Context) error {
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var sig os.Signal
	done, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		select {
		case sig = <-a.cfg.Signals:
			cancel()
		case <-done:
		}
	}()
	err := a.prepare(pctx)
	close(done)
	<-stopped
	if sig != nil {
		return &SignalError{Signal: sig}
	}
	return err
}

// agent is the state of one Run.
type agent struct {
	cfg         Config
	log         *slog.Logger
	out, errOut *lineWriter

	bin    string // the program to start
	tmpDir string // holds a built binary; removed by cleanup
	errDir string // holds the workers' error files without LogDir; removed by cleanup

	token, runID string
	port         int    // the store's port (MASTER_PORT)
	storeAddr    string // host:port workers and launchers dial
	srv          *tcpstore.Server
	st           store.Store

	gen     generation // the workers' generation
	workers []*worker
	events  chan event    // worker exits and remote failures
	waiters chan struct{} // one send per finished worker waiter goroutine
	pending int           // worker waiter goroutines not yet finished

	watchCancel context.CancelFunc
	watchDone   chan struct{}

	// interrupted is a signal that came while spawn was starting the
	// workers, which it stopped; the supervising loop handles it next.
	interrupted os.Signal
}

// takeInterrupted returns the signal that stopped spawn, if one did, after
// marking the workers it did not start as gone in m.
func (a *agent) takeInterrupted(m *monitor) (os.Signal, bool) {
	sig := a.interrupted
	if sig == nil {
		return nil, false
	}
	a.interrupted = nil
	m.notStarted(len(a.workers))
	return sig, true
}

// prepare resolves the program, sets up the store and joins the job.
func (a *agent) prepare(ctx context.Context) error {
	c := &a.cfg
	res, err := resolveProgram(c.Program, c.Dir, exec.LookPath)
	if err != nil {
		return err
	}
	a.bin = res.path
	if res.kind == kindPackage {
		a.log.Info("launch: building Go package", "package", res.path)
		start := time.Now()
		bin, tmp, err := buildPackage(ctx, c.GoCommand, res.path, c.Dir, c.Env)
		if err != nil {
			return err
		}
		a.bin, a.tmpDir = bin, tmp
		a.log.Info("launch: built", "package", res.path, "took", time.Since(start).Round(time.Millisecond))
	}

	if c.Elastic.Endpoint != "" {
		return a.prepareElastic(ctx)
	}
	a.token = c.Token
	if a.token == "" {
		if a.token, err = randomHex(32); err != nil {
			return err
		}
	}
	a.runID = c.RunID
	if a.runID == "" && c.NodeRank == 0 {
		if a.runID, err = randomHex(8); err != nil {
			return err
		}
	}
	a.port = c.MasterPort
	if err := a.openStore(ctx); err != nil {
		return err
	}
	if a.runID, err = join(ctx, a.st, c, a.runID); err != nil {
		return err
	}
	return nil
}

// openStore serves the store (node 0) and connects this launcher to it.
func (a *agent) openStore(ctx context.Context) error {
	c := &a.cfg
	if c.NodeRank == 0 {
		listen := net.JoinHostPort(c.MasterAddr, strconv.Itoa(a.port))
		if c.NNodes > 1 {
			listen = ":" + strconv.Itoa(a.port) // other hosts must reach it
		}
		srv, err := tcpstore.Listen(listen, tcpstore.Options{Token: a.token, Logger: a.log})
		if err != nil {
			return fmt.Errorf("launch: serving the job's store (is --master-port %d in use?): %w", a.port, err)
		}
		a.srv = srv
		a.port = srv.Addr().(*net.TCPAddr).Port
	}
	return a.dialStore(ctx, net.JoinHostPort(c.MasterAddr, strconv.Itoa(a.port)), fmt.Sprintf("node %d: connecting to the job's store on node 0", c.NodeRank))
}

// dialStore connects this launcher to the store at addr within
// --join-timeout; what says what failed ("connecting to …").
func (a *agent) dialStore(ctx context.Context, addr, what string) error {
	a.storeAddr = addr
	dctx, cancel := context.WithTimeout(ctx, a.cfg.JoinTimeout)
	defer cancel()
	st, err := rendezvous.Dial(dctx, addr, a.token, rendezvous.Options{Logger: a.log})
	if err != nil {
		return fmt.Errorf("launch: %s: %w", what, err)
	}
	a.st = st
	return nil
}

// closeStore disconnects and, on node 0, stops serving.
func (a *agent) closeStore() {
	if a.st != nil {
		a.st.Close()
		a.st = nil
	}
	if a.srv != nil {
		a.srv.Close()
		a.srv = nil
	}
}

// cleanup kills every worker group, waits for the agent's goroutines and
// releases the store and the build directory. It runs on every return.
func (a *agent) cleanup() {
	a.killAll()
	a.waitWorkers()
	a.stopWatch()
	a.closeStore()
	if a.tmpDir != "" {
		os.RemoveAll(a.tmpDir)
	}
	if a.errDir != "" {
		os.RemoveAll(a.errDir)
	}
}

func (a *agent) killAll() {
	for _, w := range a.workers {
		if err := w.signalGroup(syscall.SIGKILL); err != nil {
			a.log.Warn("launch: kill", "err", err)
		}
	}
}

// signalWorkers carries out a monitor's actSignal (act.sig to every
// worker's process group) or actKill (SIGKILL to each).
func (a *agent) signalWorkers(act action) {
	if act.kind == actKill {
		a.killAll()
		return
	}
	a.signalAll(act.sig)
}

func (a *agent) signalAll(sig os.Signal) {
	s, ok := sig.(syscall.Signal)
	if !ok {
		s = syscall.SIGTERM
	}
	for _, w := range a.workers {
		if err := w.signalGroup(s); err != nil {
			a.log.Warn("launch: signal", "err", err)
		}
	}
}

// waitWorkers waits until every worker waiter goroutine has finished.
// Workers exit (they were killed at the latest by killAll), so this ends.
func (a *agent) waitWorkers() {
	for ; a.pending > 0; a.pending-- {
		<-a.waiters
	}
}

func (a *agent) startWatch() {
	ctx, cancel := context.WithCancel(context.Background())
	a.watchCancel, a.watchDone = cancel, make(chan struct{})
	st, events := a.st, a.events
	go func() {
		defer close(a.watchDone)
		if msg, stop := watchFailure(ctx, st); msg != "" {
			events <- event{kind: evRemote, msg: msg, stop: stop}
		}
	}()
}

func (a *agent) stopWatch() {
	if a.watchCancel != nil {
		a.watchCancel()
		<-a.watchDone
		a.watchCancel = nil
	}
}

// generation describes one start of this node's workers: where they sit
// in the job and where the job's store is.
type generation struct {
	nodeRank, numNodes int
	rankBase, world    int // rank of local rank 0; workers in the job
	nproc              int
	restarts           int
	masterAddr         string
	masterPort         int
	storeAddr          string
	storePrefix        string // "" on a static job (a fresh store each generation)
	round              int    // elastic round, -1 on a static job
}

// staticGeneration is generation restarts of a fixed-size job.
func (a *agent) staticGeneration(restarts int) generation {
	c := &a.cfg
	return generation{
		nodeRank: c.NodeRank, numNodes: c.NNodes, rankBase: c.NodeRank * c.NProcPerNode, world: c.WorldSize(),
		nproc: c.NProcPerNode, restarts: restarts, masterAddr: c.MasterAddr, masterPort: a.port,
		storeAddr: a.storeAddr, round: -1,
	}
}

// spawn starts the workers of generation g.
func (a *agent) spawn(g generation) error {
	c := &a.cfg
	// Room for every exit plus one remote failure, so senders never block.
	a.events = make(chan event, c.NProcPerNode+1)
	if a.waiters == nil {
		a.waiters = make(chan struct{}, c.NProcPerNode)
	}
	a.workers = a.workers[:0]
	a.gen = g
	if g.round < 0 {
		a.startWatch()
	}
	threads := max(1, c.NumCPU/c.NProcPerNode)
	blocks := a.cpuBlocks()
	for local := range c.NProcPerNode {
		// A signal stops the start at once, however many workers are left
		// to start; the caller stops those already running.
		select {
		case sig := <-c.Signals:
			a.interrupted = sig
			a.log.Warn("launch: signal while starting the workers", "signal", sig, "started", local, "workers", c.NProcPerNode)
			return nil
		default:
		}
		rank := g.rankBase + local
		dir, err := a.workerDir(g, rank)
		if err != nil {
			return err
		}
		errorFile := filepath.Join(dir, "error.json")
		if err := os.Remove(errorFile); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("launch: rank %d: stale error file: %w", rank, err)
		}
		env := a.workerEnv(local, g, threads, errorFile)
		sp := workerSpec{path: a.bin, args: c.Args, env: env, dir: c.Dir, local: local, rank: rank,
			out: a.out, errOut: a.errOut, errorFile: errorFile, tailLines: c.TailLines}
		if blocks != nil {
			sp.cpus = blocks[local]
			sp.env = withDefault(sp.env, "GOMAXPROCS", strconv.Itoa(runtime.GOMAXPROCS(0)))
		}
		if c.LogDir != "" {
			sp.logDir = dir
		}
		w, err := startWorker(sp, a.events, a.waiters)
		if err != nil {
			return err
		}
		a.pending++
		a.workers = append(a.workers, w)
	}
	a.log.Info("launch: started workers", "node", g.nodeRank, "nodes", g.numNodes, "workers", c.NProcPerNode,
		"world", g.world, "store", g.storeAddr, "run_id", a.runID, "restart", g.restarts, "round", g.round, "threads", threads,
		"cpus", describeBlocks(blocks))
	return nil
}

// cpuBlocks returns the CPUs each local worker is bound to (see
// Config.CPUBind), or nil when the workers run unbound.
func (a *agent) cpuBlocks() [][]int {
	c := &a.cfg
	bind := c.CPUBind
	if v := os.Getenv("COHORT_CPU_BIND"); bind == "" && v != "" {
		b, err := ParseCPUBind(v)
		if err != nil {
			a.log.Warn("launch: ignoring COHORT_CPU_BIND", "err", err)
		}
		bind = b
	}
	if bind == BindNone || c.NProcPerNode < 2 {
		return nil
	}
	cpus := affinity.Allowed()
	return cpuBlocks(cpus[:min(len(cpus), c.NumCPU)], c.NProcPerNode)
}

// describeBlocks is the log's account of the binding: "unbound", or each
// local worker's CPUs.
func describeBlocks(blocks [][]int) string {
	if blocks == nil {
		return "unbound"
	}
	parts := make([]string, len(blocks))
	for i, b := range blocks {
		parts[i] = formatCPUs(b)
	}
	return strings.Join(parts, " ")
}

// withDefault returns env with k=v appended unless env sets k.
func withDefault(env []string, k, v string) []string {
	for _, e := range env {
		if name, _, _ := strings.Cut(e, "="); name == k {
			return env
		}
	}
	return append(env, k+"="+v)
}

// workerDir is the directory of rank's files in generation g (its error
// file and, with Config.LogDir, its output), created if needed: under
// LogDir/RUN_ID, or under a temporary directory removed when Run returns.
func (a *agent) workerDir(g generation, rank int) (string, error) {
	root := ""
	if a.cfg.LogDir != "" {
		id := a.runID
		if id == "" {
			id = "run"
		}
		root = filepath.Join(a.cfg.LogDir, id)
	} else {
		if a.errDir == "" {
			d, err := makeTempDir("errors")
			if err != nil {
				return "", fmt.Errorf("launch: directory for the workers' error files: %w", err)
			}
			a.errDir = d
		}
		root = a.errDir
	}
	attempt := "attempt_" + strconv.Itoa(g.restarts)
	if g.round >= 0 {
		attempt = "round_" + strconv.Itoa(g.round)
	}
	dir := filepath.Join(root, attempt, strconv.Itoa(rank))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("launch: rank %d: %w", rank, err)
	}
	return dir, nil
}

// workerEnv is the base environment with the launcher's variables
// replacing any of the same name.
func (a *agent) workerEnv(local int, g generation, threads int, errorFile string) []string {
	c := &a.cfg
	rank := g.rankBase + local
	vars := []struct{ k, v string }{
		{"RANK", strconv.Itoa(rank)},
		{"LOCAL_RANK", strconv.Itoa(local)},
		{"WORLD_SIZE", strconv.Itoa(g.world)},
		{"LOCAL_WORLD_SIZE", strconv.Itoa(g.nproc)},
		{"GROUP_RANK", strconv.Itoa(g.nodeRank)},
		{"NODE_RANK", strconv.Itoa(g.nodeRank)},
		{"GROUP_WORLD_SIZE", strconv.Itoa(g.numNodes)},
		{"ROLE_RANK", strconv.Itoa(rank)},
		{"ROLE_WORLD_SIZE", strconv.Itoa(g.world)},
		{"MASTER_ADDR", g.masterAddr},
		{"MASTER_PORT", strconv.Itoa(g.masterPort)},
		{"COHORT_RENDEZVOUS", string(rendezvous.Torchrun)},
		{"COHORT_STORE_ADDR", g.storeAddr},
		{"COHORT_STORE_PREFIX", g.storePrefix},
		{"COHORT_TOKEN", a.token},
		{"COHORT_RUN_ID", a.runID},
		{"COHORT_RESTART_COUNT", strconv.Itoa(g.restarts)},
		{"COHORT_NUM_THREADS", strconv.Itoa(threads)},
		{"TORCHELASTIC_RUN_ID", a.runID},
		{"TORCHELASTIC_RESTART_COUNT", strconv.Itoa(g.restarts)},
		{"TORCHELASTIC_ERROR_FILE", errorFile},
	}
	if g.round >= 0 {
		vars = append(vars, struct{ k, v string }{"COHORT_ROUND", strconv.Itoa(g.round)})
	}
	if c.Timeout > 0 {
		vars = append(vars, struct{ k, v string }{"COHORT_TIMEOUT", c.Timeout.String()})
	}
	switch {
	case c.Watchdog > 0:
		vars = append(vars, struct{ k, v string }{"COHORT_WATCHDOG", c.Watchdog.String()})
	case c.Watchdog < 0:
		vars = append(vars, struct{ k, v string }{"COHORT_WATCHDOG", "off"})
	}
	if c.Dashboard != "" {
		vars = append(vars, struct{ k, v string }{"COHORT_DASHBOARD", c.Dashboard})
	}
	names := make(map[string]bool, len(vars))
	for _, kv := range vars {
		names[kv.k] = true
	}
	env := make([]string, 0, len(c.Env)+len(vars)+1)
	hasOMP := false
	for _, e := range c.Env {
		k, _, _ := strings.Cut(e, "=")
		if names[k] || k == "COHORT_ROUND" {
			continue
		}
		hasOMP = hasOMP || k == "OMP_NUM_THREADS"
		env = append(env, e)
	}
	for _, kv := range vars {
		if kv.v == "" && kv.k == "COHORT_STORE_PREFIX" {
			continue
		}
		env = append(env, kv.k+"="+kv.v)
	}
	if !hasOMP {
		env = append(env, "OMP_NUM_THREADS="+strconv.Itoa(threads))
	}
	return env
}

// supervise runs the monitor loop until the workers are gone.
func (a *agent) supervise(ctx context.Context) error {
	c := &a.cfg
	m := newMonitor(c.NProcPerNode, c.Restart, a.describe)
	if err := a.spawn(a.staticGeneration(0)); err != nil {
		return err
	}
	var grace *time.Timer
	var graceC <-chan time.Time
	stopGrace := func() {
		if grace != nil {
			grace.Stop()
			grace, graceC = nil, nil
		}
	}
	defer stopGrace()
	ctxDone := ctx.Done()
	var queued []event // events to handle before the next select
	if sig, ok := a.takeInterrupted(m); ok {
		queued = append(queued, event{kind: evSignal, sig: sig})
	}
	for {
		var ev event
		if len(queued) > 0 {
			ev, queued = queued[0], queued[1:]
		} else {
			select {
			case ev = <-a.events:
				if ev.kind == evExit && ev.status.Failed() {
					// A signal to the launcher that raced with this exit
					// (Ctrl-C reaching a worker first) goes first: it stops
					// the job and blames no rank.
					select {
					case sig := <-c.Signals:
						a.log.Info("launch: forwarding signal to workers", "signal", sig)
						ev, queued = event{kind: evSignal, sig: sig}, append(queued, ev)
					default:
					}
				}
			case sig := <-c.Signals:
				a.log.Info("launch: forwarding signal to workers", "signal", sig)
				ev = event{kind: evSignal, sig: sig}
			case <-ctxDone:
				ctxDone = nil
				ev = event{kind: evCancel}
			case <-graceC:
				grace, graceC = nil, nil
				a.log.Warn("launch: workers did not exit within the grace period; killing them", "grace", c.GracePeriod)
				ev = event{kind: evGrace}
			}
		}
		if ev.kind == evExit {
			w := a.workers[ev.local]
			w.status, w.exited = ev.status, true
			a.log.Info("launch: worker exited", "rank", w.rank, "pid", w.pid, "status", ev.status.String())
		}
		for _, act := range m.handle(ev) {
			switch act.kind {
			case actSignal, actKill:
				a.signalWorkers(act)
			case actArm:
				stopGrace()
				grace = time.NewTimer(c.GracePeriod)
				graceC = grace.C
			case actPublish:
				if err := publishFailure(a.st, c.NodeRank, m.failure.summary(), act.stop, 5*time.Second); err != nil {
					a.log.Warn("launch: could not tell the other nodes about the failure", "err", err)
				}
			case actRestart:
				stopGrace()
				if f := m.restarted; f != nil {
					fmt.Fprintf(c.Stderr, "cohort run: %s; restarting the workers (restart %d)\n", f.summary(), m.restarts)
					a.log.Warn("launch: restarting workers", "rank", f.Rank, "status", f.how(), "restart", m.restarts)
				}
				if err := a.restart(ctx, m.restarts); err != nil {
					return err
				}
				if sig, ok := a.takeInterrupted(m); ok {
					queued = append(queued, event{kind: evSignal, sig: sig})
				}
			case actFinish:
				return a.finish(ctx, m)
			}
		}
	}
}

// restart tears the generation down and starts the next one with a fresh
// store (single node only), so no key of the failed generation survives.
func (a *agent) restart(ctx context.Context, restarts int) error {
	a.killAll()
	a.waitWorkers()
	a.stopWatch()
	a.closeStore()
	if err := a.openStore(ctx); err != nil {
		return err
	}
	if _, err := join(ctx, a.st, &a.cfg, a.runID); err != nil {
		return err
	}
	return a.spawn(a.staticGeneration(restarts))
}

// finish ends the job on this node: no process left, the exit barrier
// with the other nodes, and the outcome.
func (a *agent) finish(ctx context.Context, m *monitor) error {
	a.killAll() // descendants of workers that exited
	a.waitWorkers()
	a.stopWatch()
	outcome := m.outcome()
	if errors.Is(outcome, errCanceled) {
		outcome = fmt.Errorf("launch: %w", context.Cause(ctx))
	}
	var se *SignalError
	if errors.As(outcome, &se) {
		se.Workers = a.stops()
	}
	if a.cfg.NNodes > 1 {
		others, err := exitBarrier(a.st, &a.cfg, outcome)
		if err != nil {
			a.log.Warn("launch: exit barrier: not every node reported", "err", err)
		}
		if outcome == nil && len(others) > 0 {
			slices.Sort(others)
			outcome = &RemoteError{Msg: strings.Join(others, "; ")}
		}
	}
	return outcome
}

// stops says how each started worker ended after a signal.
func (a *agent) stops() []WorkerStop {
	var out []WorkerStop
	for _, w := range a.workers {
		if !w.exited {
			continue
		}
		ws := WorkerStop{Rank: w.rank, Status: w.status}
		if rec, err := rendezvous.ReadErrorFile(w.errorFile); err == nil {
			ws.Message = rec.Message
		}
		out = append(out, ws)
	}
	return out
}

// describe builds the WorkerError for a failed worker.
func (a *agent) describe(local int, st ExitStatus) *WorkerError {
	w := a.workers[local]
	e := &WorkerError{
		Rank: w.rank, LocalRank: local, NodeRank: a.gen.nodeRank, PID: w.pid,
		Status: st, StderrTail: w.stderrTail.snapshot(), Cause: w.stderrTail.errorCause(), ExitTime: w.exitTime,
		ErrorFile: w.errorFile, StderrLog: w.stderrLog,
	}
	if rec, err := rendezvous.ReadErrorFile(w.errorFile); err == nil {
		e.Record = &rec
	} else if !errors.Is(err, fs.ErrNotExist) {
		a.log.Warn("launch: unreadable error file", "rank", w.rank, "err", err)
	}
	return e
}
