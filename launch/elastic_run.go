package launch

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/cohortml/cohort/distributed/store/tcpstore"
)

// The store keys of an elastic job live under elasticPrefix(id):
//
//	state          the rendezvous State (JSON), changed by compare-and-swap
//	hb/NODE        NODE's heartbeat counter, incremented every keep-alive interval
//	round/R/…      round R's workers' keys (their COHORT_STORE_PREFIX)
func elasticPrefix(id string) string { return "cohort/elastic/" + id + "/" }

// opTimeout bounds one store operation of the agent loop.
const opTimeout = 10 * time.Second

// liveness tracks, on this agent's clock, when each node's heartbeat
// counter last changed. Comparing counters rather than timestamps keeps
// clocks of different hosts out of it.
type liveness struct {
	seen map[string]beatSeen
}

type beatSeen struct {
	count   int64
	changed time.Time
}

// observe records node id's counter as read at now.
func (l *liveness) observe(id string, count int64, now time.Time) {
	if l.seen == nil {
		l.seen = make(map[string]beatSeen)
	}
	if b, ok := l.seen[id]; ok && b.count == count {
		return
	}
	l.seen[id] = beatSeen{count: count, changed: now}
}

// silent is how long id's counter has not changed, counted from since if
// that is later (the moment a round opened).
func (l *liveness) silent(id string, since, now time.Time) time.Duration {
	b, ok := l.seen[id]
	if !ok {
		return 0
	}
	from := b.changed
	if since.After(from) {
		from = since
	}
	return now.Sub(from)
}

// elastic is the state of one elastic agent's loop.
type elastic struct {
	a      *agent
	e      Elastic
	lim    Limits
	me     Member
	prefix string

	raw   []byte // the state as last read
	state *State
	live  liveness

	openRound   int // the open round first seen at openedAt
	openedAt    time.Time
	lastCallAt  time.Time // last call armed (zero: not armed) for openRound
	idleSince   time.Time // since when no workers run for want of a round
	finishedAt  time.Time
	pending     []Event
	exitedSent  bool
	leaving     bool
	leaveCause  error
	lastFailure *WorkerError

	m            *monitor  // current generation's monitor; nil when none runs
	stopDeadline time.Time // SIGKILL the stopping generation after this
	genRound     int       // the round of the last generation started (-1: none)
	hbCancel     context.CancelFunc
	hbDone       chan struct{}
}

// runElastic is Run for an elastic job.
func (a *agent) runElastic(ctx context.Context) error {
	c := &a.cfg
	x := &elastic{a: a, e: c.Elastic, genRound: -1, openRound: -1}
	x.lim = Limits{MinNodes: x.e.MinNodes, MaxNodes: x.e.MaxNodes, MaxRestarts: x.e.MaxRestarts}
	x.prefix = elasticPrefix(x.e.ID)
	if err := a.prepareInterruptibly(ctx); err != nil { // build, store
		return err
	}
	id, err := nodeID()
	if err != nil {
		return err
	}
	x.me = Member{ID: id, NProc: c.NProcPerNode, Addr: localAddr(c.Elastic.Endpoint)}
	defer x.stopHeartbeat()
	x.startHeartbeat()
	a.log.Info("launch: elastic agent up", "node", x.me.ID, "endpoint", x.e.Endpoint, "host", x.serving(),
		"nnodes", x.lim.nodesFlag(), "max_restarts", x.e.MaxRestarts)
	return x.loop(ctx)
}

// prepareElastic resolves the token and run id and opens the store.
func (a *agent) prepareElastic(ctx context.Context) error {
	c := &a.cfg
	host, portStr, _ := net.SplitHostPort(c.Elastic.Endpoint)
	port, err := strconv.Atoi(portStr)
	if err != nil || port < 1 || port > 65535 {
		return fmt.Errorf("launch: --rdzv-endpoint %q: port %q is not a TCP port", c.Elastic.Endpoint, portStr)
	}
	a.token = c.Token
	if a.token == "" {
		if !isLoopbackHost(host) {
			return fmt.Errorf("launch: an elastic job across hosts (--rdzv-endpoint %s) needs COHORT_TOKEN set to the same secret on every node", c.Elastic.Endpoint)
		}
		a.token = "cohort-elastic-" + c.Elastic.ID // loopback only: every agent of the job derives the same
	}
	a.runID = c.RunID
	if a.runID == "" {
		a.runID = c.Elastic.ID
	}
	a.port = port
	serve := c.Elastic.Host == HostYes || (c.Elastic.Host == HostAuto && isLocalHost(host))
	if serve {
		listen := ":" + portStr
		if isLoopbackHost(host) {
			listen = c.Elastic.Endpoint
		}
		srv, err := tcpstore.Listen(listen, tcpstore.Options{Token: a.token, Logger: a.log})
		switch {
		case err == nil:
			a.srv = srv
		case c.Elastic.Host == HostYes || !errors.Is(err, syscall.EADDRINUSE):
			return fmt.Errorf("launch: serving the rendezvous store at %s: %w", listen, err)
		default:
			a.log.Info("launch: the rendezvous port is taken; dialing it", "endpoint", c.Elastic.Endpoint)
		}
	}
	return a.dialStore(ctx, c.Elastic.Endpoint, "connecting to the rendezvous store at "+c.Elastic.Endpoint)
}

// isLoopbackHost reports whether host names this machine's loopback.
func isLoopbackHost(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// isLocalHost reports whether host is this machine: loopback, one of its
// interface addresses or its host name.
func isLocalHost(host string) bool {
	if isLoopbackHost(host) {
		return true
	}
	if h, err := os.Hostname(); err == nil && strings.EqualFold(h, host) {
		return true
	}
	ip := net.ParseIP(host)
	if ip == nil {
		return false
	}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return false
	}
	for _, ad := range addrs {
		if n, ok := ad.(*net.IPNet); ok && n.IP.Equal(ip) {
			return true
		}
	}
	return false
}

// localAddr is this host's address on the route to endpoint (no packet
// is sent), or "" when there is none.
func localAddr(endpoint string) string {
	conn, err := net.Dial("udp", endpoint)
	if err != nil {
		return ""
	}
	defer conn.Close()
	if u, ok := conn.LocalAddr().(*net.UDPAddr); ok {
		return u.IP.String()
	}
	return ""
}

func (x *elastic) hbKey(id string) string { return x.prefix + "hb/" + id }
func (x *elastic) stateKey() string       { return x.prefix + "state" }

// startHeartbeat starts the goroutine that increments this node's
// heartbeat counter now and every keep-alive interval; stopHeartbeat
// stops it and waits.
func (x *elastic) startHeartbeat() {
	ctx, cancel := context.WithCancel(context.Background())
	x.hbCancel, x.hbDone = cancel, make(chan struct{})
	st, key, every, log := x.a.st, x.hbKey(x.me.ID), x.e.KeepAliveInterval, x.a.log
	go func() {
		defer close(x.hbDone)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			octx, ocancel := context.WithTimeout(ctx, opTimeout)
			_, err := st.Add(octx, key, 1)
			ocancel()
			if err != nil && ctx.Err() == nil {
				log.Warn("launch: heartbeat failed", "err", err)
			}
			select {
			case <-t.C:
			case <-ctx.Done():
				return
			}
		}
	}()
}

func (x *elastic) stopHeartbeat() {
	if x.hbCancel != nil {
		x.hbCancel()
		<-x.hbDone
		x.hbCancel = nil
	}
}

// loop runs the agent until the job ends for this node.
func (x *elastic) loop(ctx context.Context) error {
	a, c := x.a, &x.a.cfg
	tick := time.NewTicker(x.e.MonitorInterval)
	defer tick.Stop()
	ctxDone := ctx.Done()
	x.idleSince = time.Now()
	onSignal := func(sig os.Signal) *event {
		if !x.leaving {
			a.log.Warn("launch: leaving the job", "signal", sig)
			x.leave(&SignalError{Signal: sig})
		}
		return &event{kind: evSignal, sig: sig}
	}
	for {
		var ev *event
		var sig os.Signal
		if x.m != nil {
			sig, _ = a.takeInterrupted(x.m) // a signal stopped the workers' start
		}
		if sig != nil {
			ev = onSignal(sig)
		} else {
			select {
			case e := <-a.events:
				ev = &e
			case sig := <-c.Signals:
				ev = onSignal(sig)
			case <-ctxDone:
				ctxDone = nil
				x.leave(fmt.Errorf("launch: %w", context.Cause(ctx)))
				ev = &event{kind: evCancel}
			case <-tick.C:
			}
		}
		if ev != nil && x.m != nil {
			if ev.kind == evExit {
				w := a.workers[ev.local]
				a.log.Info("launch: worker exited", "rank", w.rank, "pid", w.pid, "status", ev.status.String())
			}
			x.act(x.m.handle(*ev))
		}
		done, err := x.step(ctx)
		if done {
			return err
		}
	}
}

// leave starts leaving the job: the state is told, the workers stopped.
func (x *elastic) leave(cause error) {
	x.leaving, x.leaveCause = true, cause
	x.pending = append(x.pending, Event{Kind: EvLeave, Me: x.me})
}

// stopWorkers asks the running generation to stop (SIGTERM, then the
// grace period); its end arrives through the monitor.
func (x *elastic) stopWorkers(why string) {
	if x.m == nil || x.m.phase != phaseRunning {
		return
	}
	x.a.log.Info("launch: stopping workers", "why", why)
	x.act(x.m.handle(event{kind: evRemote, msg: why})) // signal and arm, or finish when no worker was left
}

// act carries out the monitor's actions on the running generation: stop
// its workers, arm the grace period, end the generation.
func (x *elastic) act(acts []action) {
	for _, act := range acts {
		switch act.kind {
		case actSignal, actKill:
			x.a.signalWorkers(act)
		case actArm:
			x.stopDeadline = time.Now().Add(x.a.cfg.GracePeriod)
		case actFinish:
			x.generationEnded()
		}
	}
}

// generationEnded handles the end of the running generation.
func (x *elastic) generationEnded() {
	a := x.a
	a.killAll() // descendants of workers that exited
	a.waitWorkers()
	outcome := x.m.outcome()
	x.m = nil
	x.stopDeadline = time.Time{}
	var we *WorkerError
	switch {
	case outcome == nil:
		a.log.Info("launch: workers succeeded", "round", x.genRound)
		x.pending = append(x.pending, Event{Kind: EvSucceeded, Me: x.me, Round: x.genRound})
	case errors.As(outcome, &we):
		a.log.Warn("launch: worker failed; the job restarts in a new round", "round", x.genRound, "failure", we.summary())
		fmt.Fprintf(a.cfg.Stderr, "cohort run: %s; restarting the job\n", we.summary())
		x.lastFailure = we
		x.pending = append(x.pending, Event{Kind: EvFailed, Me: x.me, Round: x.genRound, Msg: we.summary()})
	}
	x.idleSince = time.Now()
}

// readState reads the state without blocking (a compare-and-swap that
// cannot succeed returns the current value).
func (x *elastic) readState(ctx context.Context) error {
	octx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	raw, err := x.a.st.CompareAndSwap(octx, x.stateKey(), []byte{0}, []byte{0})
	if err != nil {
		return fmt.Errorf("launch: reading the rendezvous state at %s: %w", x.e.Endpoint, err)
	}
	return x.setRaw(raw)
}

func (x *elastic) setRaw(raw []byte) error {
	st, err := decodeState(raw)
	if err != nil {
		return err
	}
	x.raw, x.state = raw, st
	return nil
}

// apply applies ev to the shared state, retrying lost races.
func (x *elastic) apply(ctx context.Context, ev Event) error {
	for range 1000 {
		next, err := Apply(x.state, ev, x.lim)
		if err != nil {
			return err
		}
		enc := next.encode()
		if x.state != nil && bytes.Equal(enc, x.state.encode()) {
			return nil
		}
		var expected []byte
		if x.state != nil {
			expected = x.raw
		}
		octx, cancel := context.WithTimeout(ctx, opTimeout)
		got, err := x.a.st.CompareAndSwap(octx, x.stateKey(), expected, enc)
		cancel()
		if err != nil {
			return fmt.Errorf("launch: updating the rendezvous state (%v): %w", ev.Kind, err)
		}
		if err := x.setRaw(got); err != nil {
			return err
		}
		if bytes.Equal(got, enc) {
			x.a.log.Debug("launch: rendezvous", "event", ev.Kind.String(), "round", next.Round, "closed", next.Closed, "nodes", memberIDs(next.Nodes))
			return nil
		}
	}
	return fmt.Errorf("launch: updating the rendezvous state (%v): too much contention", ev.Kind)
}

// observe reads the heartbeat counters of every node the state names.
func (x *elastic) observe(ctx context.Context, now time.Time) error {
	s := x.state
	if s == nil {
		return nil
	}
	ids := append(append(memberIDs(s.Nodes), memberIDs(s.Waiting)...), s.Expect...)
	for _, id := range ids {
		if id == x.me.ID {
			continue
		}
		octx, cancel := context.WithTimeout(ctx, opTimeout)
		n, err := x.a.st.Add(octx, x.hbKey(id), 0)
		cancel()
		if err != nil {
			return fmt.Errorf("launch: reading node %s's heartbeat: %w", id, err)
		}
		x.live.observe(id, n, now)
	}
	return nil
}

// dead returns the nodes this agent finds dead in the state.
func (x *elastic) dead(now time.Time) []string {
	s := x.state
	if s == nil {
		return nil
	}
	full := x.e.KeepAliveInterval * time.Duration(x.e.KeepAliveMaxAttempt)
	grace := x.e.KeepAliveInterval + time.Second
	var dead []string
	for _, id := range append(memberIDs(s.Nodes), memberIDs(s.Waiting)...) {
		if id != x.me.ID && x.live.silent(id, time.Time{}, now) > full {
			dead = append(dead, id)
		}
	}
	if !s.Closed {
		for _, id := range s.Expect {
			if id != x.me.ID && !s.has(id) && !slices.Contains(dead, id) && x.live.silent(id, time.Time{}, now) > grace {
				dead = append(dead, id)
			}
		}
	}
	return dead
}

// step reads the state, reports this agent's events and acts on its
// role. done reports that the job ended for this node, with err.
func (x *elastic) step(ctx context.Context) (done bool, err error) {
	a := x.a
	now := time.Now()
	if !x.stopDeadline.IsZero() && now.After(x.stopDeadline) && x.m != nil {
		for _, act := range x.m.handle(event{kind: evGrace}) {
			if act.kind == actKill {
				a.log.Warn("launch: workers did not exit within the grace period; killing them")
				a.killAll()
			}
		}
		x.stopDeadline = time.Time{}
	}
	bg := context.WithoutCancel(ctx) // leaving must still reach the store
	if err := x.readState(bg); err != nil {
		return x.lost(err)
	}
	if err := x.observe(bg, now); err != nil {
		return x.lost(err)
	}
	s := x.state
	if s != nil && !s.Closed && s.Round != x.openRound {
		x.openRound, x.openedAt, x.lastCallAt = s.Round, now, time.Time{}
	}
	evs := x.pending
	x.pending = nil
	if role, _ := Role(s, x.me.ID); role == RoleJoin && !x.leaving {
		evs = append(evs, Event{Kind: EvJoin, Me: x.me})
	}
	if d := x.dead(now); len(d) > 0 {
		a.log.Warn("launch: nodes stopped heartbeating", "nodes", d)
		evs = append(evs, Event{Kind: EvDead, Me: x.me, IDs: d})
	}
	if s != nil && !s.Closed && len(s.Nodes) >= s.MinNodes {
		if x.lastCallAt.IsZero() {
			x.lastCallAt = now
		} else if now.Sub(x.lastCallAt) >= x.e.LastCallTimeout {
			evs = append(evs, Event{Kind: EvLastCall, Me: x.me, Round: s.Round})
		}
	}
	for _, ev := range evs {
		if err := x.apply(bg, ev); err != nil {
			if x.state != nil && x.state.Failed == "" && strings.Contains(err.Error(), "--nnodes") {
				return true, err
			}
			return x.lost(err)
		}
	}
	role, asg := Role(x.state, x.me.ID)
	switch role {
	case RoleFailed:
		x.stopWorkers("the job failed")
		if x.m != nil {
			return false, nil
		}
		if x.lastFailure != nil && strings.Contains(x.state.Failed, "node "+x.me.ID+":") {
			return true, x.lastFailure
		}
		return true, &RemoteError{Msg: x.state.Failed}
	case RoleFinished:
		x.stopWorkers("the job finished")
		if x.m != nil {
			return false, nil
		}
		if !x.state.has(x.me.ID) {
			a.log.Warn("launch: the job is already finishing; not joining")
			return true, x.leaveCause
		}
		if !x.serving() {
			if !x.exitedSent {
				x.exitedSent = true
				if err := x.apply(bg, Event{Kind: EvExited, Me: x.me}); err != nil {
					a.log.Warn("launch: could not report leaving", "err", err)
				}
			}
			return true, nil
		}
		if x.finishedAt.IsZero() {
			x.finishedAt = now
		}
		// The host keeps serving until every other node has left.
		others := slices.DeleteFunc(slices.Clone(x.state.Done), func(id string) bool { return id == x.me.ID })
		all := true
		for _, id := range others {
			all = all && slices.Contains(x.state.Exited, id)
		}
		if all || now.Sub(x.finishedAt) > a.cfg.ExitBarrierTimeout {
			return true, nil
		}
		return false, nil
	case RoleRun:
		if x.leaving {
			x.stopWorkers("leaving")
			break
		}
		if x.genRound == asg.Round {
			return false, nil // running, or ended and reported
		}
		if x.m != nil {
			x.stopWorkers(fmt.Sprintf("round %d begins: %s", asg.Round, x.state.Reason))
			return false, nil
		}
		if err := x.spawn(asg); err != nil {
			return true, err
		}
		return false, nil
	default: // join, standby, wait
		x.stopWorkers(fmt.Sprintf("round %d is open: %s", x.roundOf(), x.reason()))
	}
	if x.leaving {
		if x.m == nil {
			return true, x.leaveCause
		}
		return false, nil
	}
	if x.m == nil && now.Sub(x.idleSince) > a.cfg.JoinTimeout {
		return true, fmt.Errorf("launch: node %s: no round with at least %d nodes formed within %v (--join-timeout); last state: round %d, nodes %v",
			x.me.ID, x.lim.MinNodes, a.cfg.JoinTimeout, x.roundOf(), memberIDs(x.nodes()))
	}
	return false, nil
}

func (x *elastic) serving() bool { return x.a.srv != nil }

func (x *elastic) roundOf() int {
	if x.state == nil {
		return 0
	}
	return x.state.Round
}

func (x *elastic) reason() string {
	if x.state == nil || x.state.Reason == "" {
		return "first round"
	}
	return x.state.Reason
}

func (x *elastic) nodes() []Member {
	if x.state == nil {
		return nil
	}
	return x.state.Nodes
}

// lost handles a store that cannot be reached: after this node's workers
// succeeded that is the job ending; otherwise the job is lost.
func (x *elastic) lost(err error) (bool, error) {
	if x.state != nil && slices.Contains(x.state.Done, x.me.ID) {
		x.a.log.Warn("launch: the rendezvous store went away after this node finished", "err", err)
		return true, nil
	}
	if x.m != nil {
		x.stopWorkers("lost the rendezvous store")
		x.a.log.Warn("launch: lost the rendezvous store; stopping the workers", "err", err)
		return false, nil
	}
	if x.leaving {
		return true, x.leaveCause
	}
	return true, &RemoteError{Msg: err.Error()}
}

// spawn starts the workers of a closed round.
func (x *elastic) spawn(asg Assignment) error {
	a := x.a
	host, port, _ := net.SplitHostPort(x.e.Endpoint)
	p, _ := strconv.Atoi(port)
	g := generation{
		nodeRank: asg.NodeRank, numNodes: asg.NumNodes, rankBase: asg.RankBase, world: asg.WorldSize,
		nproc: asg.NProc, restarts: asg.Restarts, masterAddr: host, masterPort: p,
		storeAddr: x.e.Endpoint, storePrefix: x.prefix + "round/" + strconv.Itoa(asg.Round) + "/", round: asg.Round,
	}
	x.genRound = asg.Round
	x.m = newMonitor(a.cfg.NProcPerNode, nil, a.describe)
	fmt.Fprintf(a.cfg.Stderr, "cohort run: round %d: node rank %d of %d, ranks %d..%d of world %d, restart %d (%s)\n",
		asg.Round, asg.NodeRank, asg.NumNodes, asg.RankBase, asg.RankBase+asg.NProc-1, asg.WorldSize, asg.Restarts, x.reason())
	if err := a.spawn(g); err != nil {
		x.m = nil
		return err
	}
	return nil
}

// nodeID names this agent in the state: host name, pid and a random
// suffix, so two agents on one host (or a restarted one) never collide.
func nodeID() (string, error) {
	h, err := os.Hostname()
	if err != nil || h == "" {
		h = "node"
	}
	r, err := randomHex(2)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("%s-%d-%s", h, os.Getpid(), r), nil
}
