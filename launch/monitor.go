package launch

import (
	"os"
	"syscall"
)

// The monitor is the agent's decision logic as a small state machine with
// no I/O: Run feeds it events (a worker exited, a signal arrived, the
// grace period ran out, another node failed) and carries out the actions
// it returns (signal the workers, kill them, restart, finish). Keeping it
// pure lets the tests walk every transition as data, and gives elastic
// restarts one place to grow.
//
//	running  ──worker fails / signal / cancel / remote failure──▶ stopping
//	running  ──last worker exits 0──▶ done
//	running  ──worker stopped itself after a signal (exit 130/143)──▶ stopping (nothing sent)
//	running  ──another node's worker did (its published stop)──▶ stopping (nothing sent)
//	stopping ──grace expires (nothing sent yet)──▶ stopping (SIGTERM sent)
//	stopping ──grace expires or second signal──▶ stopping (SIGKILL sent)
//	stopping ──last worker exits──▶ done, or running again (restart)
//
// The failure reported (outcome) is not simply the first exit seen: of the
// workers that failed in the generation, the one whose failure began
// first is blamed (see blame), so a worker stopped by a signal is named
// rather than the peers that exited before it because it left.
//
// A worker that exits 130 or 143 stopped itself after a signal
// (distributed.Stopper): its peers learn of the stop through the store and
// stop after the same step, saving a checkpoint. SIGTERM to them then would
// be a second signal, which stops them at once and may cut their save
// short, so the monitor only arms the grace timer and sends SIGTERM when it
// runs out (then SIGKILL after another grace period). It publishes the
// failure as a stop, and the other nodes' monitors do the same for their
// workers when they learn of it.
//
// Invariant: alive counts the workers of the current generation that have
// not been reported exited; 0 <= alive <= len(exited).

type phase int

const (
	phaseRunning phase = iota
	phaseStopping
	phaseDone
)

func (p phase) String() string {
	return [...]string{"running", "stopping", "done"}[p]
}

type eventKind int

const (
	evExit   eventKind = iota // a worker exited: local, status
	evSignal                  // the launcher received sig
	evCancel                  // the launcher's context ended
	evRemote                  // another node failed (or the store was lost): msg
	evGrace                   // the grace period after SIGTERM ended
)

type event struct {
	kind   eventKind
	local  int        // evExit: local rank
	status ExitStatus // evExit
	sig    os.Signal  // evSignal
	msg    string     // evRemote
	stop   bool       // evRemote: the other node's workers stop by themselves after a signal
}

type actionKind int

const (
	actSignal  actionKind = iota // send sig to every worker's process group
	actKill                      // SIGKILL every worker's process group
	actArm                       // start the grace timer
	actPublish                   // tell other nodes that failure happened here
	actRestart                   // every worker is gone: start generation restarts
	actFinish                    // every worker is gone: return the outcome
)

type action struct {
	kind actionKind
	sig  os.Signal
	stop bool // actPublish: the failure is a stop after a signal
}

// stopCause says why the workers are being stopped.
type stopCause int

const (
	causeNone stopCause = iota
	causeFailure
	causeSignal
	causeCancel
	causeRemote
)

// monitor tracks one node's workers across generations.
type monitor struct {
	phase   phase
	exited  []bool // per local rank, current generation
	alive   int
	cause   stopCause
	failure *WorkerError   // first failure of the current generation
	failed  []*WorkerError // every failure of the current generation, in order
	// restarted is the failure blamed for the last restart.
	restarted *WorkerError
	signal    os.Signal // causeSignal
	remote    string    // causeRemote
	restarts  int       // generations restarted so far
	restart   bool      // the current stop ends in a restart
	killed    bool      // SIGKILL already sent this generation
	waiting   bool      // stopping without having signalled: the workers stop themselves
	policy    RestartPolicy
	describe  func(local int, st ExitStatus) *WorkerError
}

// newMonitor starts generation 0 with n workers running.
func newMonitor(n int, policy RestartPolicy, describe func(local int, st ExitStatus) *WorkerError) *monitor {
	m := &monitor{policy: policy, describe: describe}
	m.startGeneration(n)
	return m
}

func (m *monitor) startGeneration(n int) {
	m.phase = phaseRunning
	m.exited = make([]bool, n)
	m.alive = n
	m.cause, m.failure, m.failed, m.signal, m.remote = causeNone, nil, nil, nil, ""
	m.restart, m.killed, m.waiting = false, false, false
}

// handle applies one event and returns the actions to carry out, in order.
func (m *monitor) handle(ev event) []action {
	switch m.phase {
	case phaseDone:
		return nil
	case phaseRunning:
		return m.running(ev)
	default:
		return m.stopping(ev)
	}
}

func (m *monitor) running(ev event) []action {
	switch ev.kind {
	case evExit:
		if !m.markExited(ev.local) {
			return nil
		}
		if !ev.status.Failed() {
			if m.alive == 0 {
				return m.finish()
			}
			return nil
		}
		m.cause = causeFailure
		m.failure = m.describe(ev.local, ev.status)
		m.failure.Restarts = m.restarts
		m.failed = append(m.failed, m.failure)
		m.restart = m.policy != nil && m.policy(m.failure, m.restarts)
		sig, ok := ev.status.exitSignal()
		stop := ok && !m.restart && (sig == syscall.SIGINT || sig == syscall.SIGTERM)
		var acts []action
		if !m.restart {
			acts = append(acts, action{kind: actPublish, stop: stop})
		}
		if stop {
			// A stop by signal: the peers are stopping after the same step.
			return append(acts, m.await()...)
		}
		return append(acts, m.stop(syscall.SIGTERM)...)
	case evSignal:
		m.cause, m.signal = causeSignal, ev.sig
		return m.stop(ev.sig)
	case evCancel:
		m.cause = causeCancel
		return m.stop(syscall.SIGTERM)
	case evRemote:
		m.cause, m.remote = causeRemote, ev.msg
		if ev.stop {
			// Another node's worker stopped itself after a signal: every
			// rank is stopping after the same step, these too.
			return m.await()
		}
		return m.stop(syscall.SIGTERM)
	}
	return nil
}

// await lets the workers stop by themselves (they stop after the same
// step as a peer that got a signal): it only arms the grace timer, or
// finishes at once if none is left.
func (m *monitor) await() []action {
	m.phase, m.waiting = phaseStopping, true
	if m.alive == 0 {
		return m.finish()
	}
	return []action{{kind: actArm}}
}

// stop asks every worker to exit, or finishes at once if none is left.
func (m *monitor) stop(sig os.Signal) []action {
	m.phase = phaseStopping
	if m.alive == 0 {
		return m.finish()
	}
	return []action{{kind: actSignal, sig: sig}, {kind: actArm}}
}

func (m *monitor) stopping(ev event) []action {
	switch ev.kind {
	case evExit:
		if !m.markExited(ev.local) {
			return nil
		}
		if m.cause == causeFailure && ev.status.Failed() {
			f := m.describe(ev.local, ev.status)
			f.Restarts = m.restarts
			m.failed = append(m.failed, f)
		}
		if m.alive == 0 {
			return m.finish()
		}
	case evGrace:
		if m.waiting {
			// The workers did not stop by themselves: ask them.
			m.waiting = false
			return []action{{kind: actSignal, sig: syscall.SIGTERM}, {kind: actArm}}
		}
		return m.kill()
	case evSignal:
		if m.waiting {
			// The first signal the launcher itself received: forward it
			// (the workers are stopping anyway; this is their first).
			m.waiting = false
			return []action{{kind: actSignal, sig: ev.sig}, {kind: actArm}}
		}
		// A second signal while stopping: stop waiting politely.
		if m.cause != causeSignal {
			m.cause, m.signal = causeSignal, ev.sig
			m.restart = false
		}
		return m.kill()
	case evCancel:
		m.restart = false
		return m.kill()
	}
	return nil
}

func (m *monitor) kill() []action {
	if m.killed {
		return nil
	}
	m.killed = true
	return []action{{kind: actKill}}
}

// notStarted marks the workers from local rank n on as gone: a signal
// stopped their start (they never ran).
func (m *monitor) notStarted(n int) {
	for local := n; local < len(m.exited); local++ {
		m.markExited(local)
	}
}

func (m *monitor) markExited(local int) bool {
	if local < 0 || local >= len(m.exited) || m.exited[local] {
		return false
	}
	m.exited[local] = true
	m.alive--
	return true
}

func (m *monitor) finish() []action {
	if m.restart {
		m.restarted = blame(m.failed)
		m.restarts++
		m.startGeneration(len(m.exited))
		return []action{{kind: actRestart}}
	}
	m.phase = phaseDone
	return []action{{kind: actFinish}}
}

// outcome is the error Run returns once the monitor is done.
func (m *monitor) outcome() error {
	switch m.cause {
	case causeFailure:
		return blame(m.failed)
	case causeSignal:
		return &SignalError{Signal: m.signal}
	case causeRemote:
		return &RemoteError{Msg: m.remote}
	case causeCancel:
		return errCanceled
	}
	return nil
}
