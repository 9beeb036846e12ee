package launch

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cohortml/cohort/distributed/rendezvous"
)

// TestMonitor walks the state machine through event sequences and checks
// the actions and the outcome, as a transcript.
func TestMonitor(t *testing.T) {
	exit := func(local, code int) event { return event{kind: evExit, local: local, status: ExitStatus{Code: code}} }
	killed := func(local int, sig syscall.Signal) event {
		return event{kind: evExit, local: local, status: ExitStatus{Code: -1, Signal: sig}}
	}
	tests := []struct {
		name    string
		workers int
		policy  RestartPolicy
		events  []event
		want    []string // actions per event, "" for none
		outcome string   // substring of the outcome error; "" for nil
		phase   phase
	}{
		{
			name: "all-succeed", workers: 2,
			events: []event{exit(1, 0), exit(0, 0)},
			want:   []string{"", "finish"},
			phase:  phaseDone,
		},
		{
			name: "failure-stops-the-others", workers: 3,
			events:  []event{exit(1, 3), killed(0, syscall.SIGTERM), killed(2, syscall.SIGTERM)},
			want:    []string{"publish signal(terminated) arm", "", "finish"},
			outcome: "rank 1 (local rank 1 on node 0, pid 101) exited with code 3",
			phase:   phaseDone,
		},
		{
			name: "grace-expires-then-kill", workers: 2,
			events:  []event{exit(0, 3), {kind: evGrace}, {kind: evGrace}, killed(1, syscall.SIGKILL)},
			want:    []string{"publish signal(terminated) arm", "kill", "", "finish"},
			outcome: "rank 0",
			phase:   phaseDone,
		},
		{
			name: "killed-by-signal-is-a-failure", workers: 2,
			events:  []event{killed(1, syscall.SIGKILL), exit(0, 143)},
			want:    []string{"publish signal(terminated) arm", "finish"},
			outcome: "killed by signal 9",
			phase:   phaseDone,
		},
		{
			name: "later-failures-do-not-replace-the-first", workers: 3,
			events:  []event{exit(2, 7), exit(0, 1), exit(1, 1)},
			want:    []string{"publish signal(terminated) arm", "", "finish"},
			outcome: "rank 2 (local rank 2 on node 0, pid 102) exited with code 7",
			phase:   phaseDone,
		},
		{
			name: "success-then-failure", workers: 2,
			events:  []event{exit(0, 0), exit(1, 2)},
			want:    []string{"", "publish finish"},
			outcome: "rank 1",
			phase:   phaseDone,
		},
		{
			name: "signal-forwarded-then-second-kills", workers: 2,
			events:  []event{{kind: evSignal, sig: syscall.SIGINT}, {kind: evSignal, sig: syscall.SIGINT}, exit(0, 130), exit(1, 130)},
			want:    []string{"signal(interrupt) arm", "kill", "", "finish"},
			outcome: "stopped by signal interrupt",
			phase:   phaseDone,
		},
		{
			name: "signal-stop-waits-for-its-peers", workers: 3,
			events:  []event{exit(1, 130), exit(0, 130), exit(2, 130)},
			want:    []string{"publish(stop) arm", "", "finish"},
			outcome: "rank 1 (local rank 1 on node 0, pid 101) exited with code 130",
			phase:   phaseDone,
		},
		{
			name: "signal-stop-alone", workers: 1,
			events:  []event{exit(0, 143)},
			want:    []string{"publish(stop) finish"},
			outcome: "rank 0",
			phase:   phaseDone,
		},
		{
			name: "signal-stop-grace-then-sigterm-then-kill", workers: 2,
			events:  []event{exit(1, 143), {kind: evGrace}, {kind: evGrace}, {kind: evGrace}, killed(0, syscall.SIGKILL)},
			want:    []string{"publish(stop) arm", "signal(terminated) arm", "kill", "", "finish"},
			outcome: "rank 1",
			phase:   phaseDone,
		},
		{
			name: "signal-stop-then-launcher-signal-forwarded", workers: 2,
			events:  []event{exit(1, 130), {kind: evSignal, sig: syscall.SIGINT}, {kind: evSignal, sig: syscall.SIGINT}, exit(0, 130)},
			want:    []string{"publish(stop) arm", "signal(interrupt) arm", "kill", "finish"},
			outcome: "stopped by signal interrupt",
			phase:   phaseDone,
		},
		{
			name: "killed-by-sigint-is-not-a-stop", workers: 2,
			events:  []event{killed(1, syscall.SIGINT), exit(0, 143)},
			want:    []string{"publish signal(terminated) arm", "finish"},
			outcome: "killed by signal 2",
			phase:   phaseDone,
		},
		{
			name: "signal-stop-with-restarts-stops-the-others", workers: 2, policy: MaxRestarts(1),
			events: []event{exit(1, 130), exit(0, 143), exit(0, 0), exit(1, 0)},
			want:   []string{"signal(terminated) arm", "restart", "", "finish"},
			phase:  phaseDone,
		},
		{
			name: "cancel", workers: 1,
			events:  []event{{kind: evCancel}, exit(0, 0)},
			want:    []string{"signal(terminated) arm", "finish"},
			outcome: "canceled",
			phase:   phaseDone,
		},
		{
			name: "remote-failure", workers: 2,
			events:  []event{{kind: evRemote, msg: "node 1: rank 3 exited with code 3"}, exit(0, 143), exit(1, 143)},
			want:    []string{"signal(terminated) arm", "", "finish"},
			outcome: "stopped: node 1: rank 3 exited with code 3",
			phase:   phaseDone,
		},
		{
			// another node's worker stopped itself after a signal: these
			// stop after the same step by themselves, nothing is sent
			name: "remote-stop-waits", workers: 2,
			events:  []event{{kind: evRemote, msg: "node 1: rank 3 exited with code 143", stop: true}, exit(0, 143), exit(1, 143)},
			want:    []string{"arm", "", "finish"},
			outcome: "stopped: node 1: rank 3 exited with code 143",
			phase:   phaseDone,
		},
		{
			name: "remote-stop-grace-then-sigterm-then-kill", workers: 2,
			events:  []event{{kind: evRemote, msg: "node 1: rank 3 exited with code 130", stop: true}, {kind: evGrace}, {kind: evGrace}, killed(0, syscall.SIGKILL), killed(1, syscall.SIGKILL)},
			want:    []string{"arm", "signal(terminated) arm", "kill", "", "finish"},
			outcome: "stopped: node 1: rank 3 exited with code 130",
			phase:   phaseDone,
		},
		{
			name: "remote-stop-then-launcher-signal-forwarded", workers: 1,
			events:  []event{{kind: evRemote, msg: "node 1: rank 1 exited with code 130", stop: true}, {kind: evSignal, sig: syscall.SIGINT}, {kind: evSignal, sig: syscall.SIGINT}, killed(0, syscall.SIGKILL)},
			want:    []string{"arm", "signal(interrupt) arm", "kill", "finish"},
			outcome: "stopped by signal interrupt",
			phase:   phaseDone,
		},
		{
			name: "remote-after-own-failure-ignored", workers: 2,
			events:  []event{exit(0, 3), {kind: evRemote, msg: "node 0: rank 0"}, exit(1, 143)},
			want:    []string{"publish signal(terminated) arm", "", "finish"},
			outcome: "rank 0",
			phase:   phaseDone,
		},
		{
			name: "duplicate-and-bogus-exits-ignored", workers: 2,
			events: []event{exit(0, 0), exit(0, 0), exit(5, 0), exit(1, 0)},
			want:   []string{"", "", "", "finish"},
			phase:  phaseDone,
		},
		{
			name: "restart-then-succeed", workers: 2, policy: MaxRestarts(1),
			events: []event{exit(1, 3), exit(0, 143), exit(0, 0), exit(1, 0)},
			want:   []string{"signal(terminated) arm", "restart", "", "finish"},
			phase:  phaseDone,
		},
		{
			name: "restarts-exhausted", workers: 1, policy: MaxRestarts(1),
			events:  []event{exit(0, 3), exit(0, 3)},
			want:    []string{"restart", "publish finish"},
			outcome: "rank 0",
			phase:   phaseDone,
		},
		{
			name: "signal-while-restarting-cancels-restart", workers: 2, policy: MaxRestarts(5),
			events:  []event{exit(0, 3), {kind: evSignal, sig: syscall.SIGTERM}, exit(1, 143)},
			want:    []string{"signal(terminated) arm", "kill", "finish"},
			outcome: "stopped by signal terminated",
			phase:   phaseDone,
		},
		{
			name: "events-after-done-ignored", workers: 1,
			events: []event{exit(0, 0), {kind: evSignal, sig: syscall.SIGINT}, {kind: evGrace}},
			want:   []string{"finish", "", ""},
			phase:  phaseDone,
		},
		{
			name: "still-running", workers: 2,
			events: []event{exit(0, 0)},
			want:   []string{""},
			phase:  phaseRunning,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := newMonitor(tc.workers, tc.policy, func(local int, st ExitStatus) *WorkerError {
				return &WorkerError{Rank: local, LocalRank: local, PID: 100 + local, Status: st}
			})
			if len(tc.want) != len(tc.events) {
				t.Fatalf("bad test: %d events, %d expectations", len(tc.events), len(tc.want))
			}
			for i, ev := range tc.events {
				if got := formatActions(m.handle(ev)); got != tc.want[i] {
					t.Fatalf("event %d (%+v): actions %q; want %q", i, ev, got, tc.want[i])
				}
			}
			if m.phase != tc.phase {
				t.Fatalf("phase %v; want %v", m.phase, tc.phase)
			}
			err := m.outcome()
			switch {
			case tc.outcome == "" && err != nil:
				t.Fatalf("outcome %v; want nil", err)
			case tc.outcome != "" && (err == nil || !strings.Contains(err.Error(), tc.outcome)):
				t.Fatalf("outcome %v; want an error containing %q", err, tc.outcome)
			}
		})
	}
}

func formatActions(acts []action) string {
	var parts []string
	for _, a := range acts {
		switch a.kind {
		case actSignal:
			parts = append(parts, fmt.Sprintf("signal(%v)", a.sig))
		case actKill:
			parts = append(parts, "kill")
		case actArm:
			parts = append(parts, "arm")
		case actPublish:
			if a.stop {
				parts = append(parts, "publish(stop)")
			} else {
				parts = append(parts, "publish")
			}
		case actRestart:
			parts = append(parts, "restart")
		case actFinish:
			parts = append(parts, "finish")
		}
	}
	return strings.Join(parts, " ")
}

func TestOutcomeTypes(t *testing.T) {
	m := newMonitor(1, nil, func(local int, st ExitStatus) *WorkerError { return &WorkerError{Status: st} })
	m.handle(event{kind: evSignal, sig: os.Interrupt})
	m.handle(event{kind: evExit, local: 0, status: ExitStatus{Code: 130}})
	var se *SignalError
	if err := m.outcome(); !errors.As(err, &se) || se.ExitCode() != 130 {
		t.Fatalf("outcome %v; want a *SignalError with exit code 130", err)
	}
}

// TestBlame: of a generation's failures the one that began first is
// named; a worker's recorded signal or error time counts before its exit.
func TestBlame(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	fail := func(rank, code, exitMs int, rec *rendezvous.ErrorRecord) *WorkerError {
		return &WorkerError{Rank: rank, LocalRank: rank, Status: ExitStatus{Code: code}, ExitTime: at(exitMs), Record: rec}
	}
	tests := []struct {
		name   string
		failed []*WorkerError
		rank   int
		others []string
	}{
		{"first-exit", []*WorkerError{fail(0, 1, 10, nil), fail(1, 1, 20, nil)}, 0, []string{"rank 1 exited with code 1"}},
		{"signal-before-peer-exit", []*WorkerError{
			fail(0, 1, 10, &rendezvous.ErrorRecord{Time: at(9)}),
			fail(1, 143, 300, &rendezvous.ErrorRecord{Time: at(299), Signal: "SIGTERM", SignalTime: at(5)}),
		}, 1, []string{"rank 0 exited with code 1"}},
		{"recorded-error-before-exit", []*WorkerError{fail(2, 1, 10, nil), fail(3, 1, 50, &rendezvous.ErrorRecord{Time: at(4)})}, 3, []string{"rank 2 exited with code 1"}},
		{"launchers-sigterm-is-not-blamed", []*WorkerError{
			fail(0, 1, 10, nil),
			fail(1, 1, 40, &rendezvous.ErrorRecord{Time: at(39), Signal: "SIGTERM", SignalTime: at(11)}),
		}, 0, []string{"rank 1 was stopped by SIGTERM (then exited with code 1)"}},
		{"tie-keeps-order", []*WorkerError{fail(1, 1, 10, nil), fail(0, 1, 10, nil)}, 1, []string{"rank 0 exited with code 1"}},
		{"alone", []*WorkerError{fail(4, 2, 10, nil)}, 4, nil},
		{"stopped-together", []*WorkerError{
			fail(0, 143, 10, &rendezvous.ErrorRecord{Time: at(9), Signal: "SIGTERM", Message: "distributed: stopped by SIGTERM (received by another rank) after step 6; checkpoint saved in ck"}),
			fail(1, 143, 12, &rendezvous.ErrorRecord{Time: at(11), Signal: "SIGTERM", SignalTime: at(2), Message: "distributed: stopped by SIGTERM after step 6; checkpoint saved in ck"}),
			fail(2, 143, 13, &rendezvous.ErrorRecord{Time: at(12), Signal: "SIGTERM", SignalTime: at(12), Message: "stopped by SIGTERM"}),
		}, 1, []string{
			"rank 0 exited with code 143 (128+SIGTERM: it was stopped by that signal): distributed: stopped by SIGTERM (received by another rank) after step 6; checkpoint saved in ck",
			"rank 2 exited with code 143 (128+SIGTERM: it was stopped by that signal)",
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := blame(tc.failed)
			if got.Rank != tc.rank || !slices.Equal(got.Others, tc.others) {
				t.Fatalf("blame = rank %d, others %q; want rank %d, others %q", got.Rank, got.Others, tc.rank, tc.others)
			}
		})
	}
	if blame(nil) != nil {
		t.Fatal("blame(nil) != nil")
	}
}

// TestExitStatusString: 128+N reads as "stopped by signal N".
func TestExitStatusString(t *testing.T) {
	for _, tc := range []struct {
		st   ExitStatus
		want string
	}{
		{ExitStatus{Code: 1}, "exited with code 1"},
		{ExitStatus{Code: 143}, "exited with code 143 (128+SIGTERM: it was stopped by that signal)"},
		{ExitStatus{Code: 130}, "exited with code 130 (128+SIGINT: it was stopped by that signal)"},
		{ExitStatus{Code: 140}, "exited with code 140"},
		{ExitStatus{Code: -1, Signal: syscall.SIGTERM}, "was killed by signal 15 (SIGTERM)"},
	} {
		if got := tc.st.String(); got != tc.want {
			t.Errorf("%+v: %q; want %q", tc.st, got, tc.want)
		}
	}
}
