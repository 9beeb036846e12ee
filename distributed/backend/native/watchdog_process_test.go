//go:build unix

package native_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cohortml/cohort/distributed"
)

func init() { childScenarios["watchdog-sigstop"] = childWatchdogSigstop }

// childWatchdogSigstop: every rank's group has a 2 s watchdog
// (COHORT_WATCHDOG, read by runChild) that logs to stdout; after a broadcast, rank 1 stops itself with SIGSTOP; the others
// print "entering" and all-reduce. The parent checks the report, then
// resumes rank 1 and every rank finishes.
func childWatchdogSigstop(ctx context.Context, pg distributed.ProcessGroup) error {
	buf := distributed.F32(make([]float32, 256))
	if err := pg.Broadcast(ctx, buf, 0).Wait(); err != nil {
		return err
	}
	if pg.Rank() == 1 {
		// Stop only after the watchdog has published a heartbeat that
		// holds the broadcast (it publishes every Interval/4 = 0.5 s):
		// the broadcast may finish before the first one.
		time.Sleep(750 * time.Millisecond)
		if err := syscall.Kill(os.Getpid(), syscall.SIGSTOP); err != nil {
			return err
		}
		// The stop lands asynchronously; the sleep keeps this rank out of
		// the all-reduce until it does (and resumes after SIGCONT).
		time.Sleep(200 * time.Millisecond)
	} else {
		fmt.Println("entering")
	}
	if err := pg.AllReduce(ctx, buf, distributed.Sum).Wait(); err != nil {
		return err
	}
	return pg.Barrier(ctx).Wait()
}

// TestRealProcessesWatchdogSigstop: a SIGSTOPped rank is named from its
// last heartbeat within the watchdog interval + 5 s, and the job is not
// killed: resumed, every rank finishes.
func TestRealProcessesWatchdogSigstop(t *testing.T) {
	if testing.Short() {
		t.Skip("real-process tests skipped in -short mode")
	}
	const world = 3
	children := spawn(t, world, "tcp", "watchdog-sigstop", "COHORT_WATCHDOG=2s")
	if !children[0].await("entering", 60*time.Second) {
		t.Fatalf("rank 0 never reached the all-reduce: %s", children[0].stderr.String())
	}
	if !children[2].await("entering", 10*time.Second) {
		t.Fatalf("rank 2 never reached the all-reduce: %s", children[2].stderr.String())
	}
	entered := time.Now()
	// Either waiting rank may claim the report.
	var report string
	deadline := time.After(2*time.Second + 5*time.Second)
	l0, l2 := children[0].lines, children[2].lines
	for report == "" && (l0 != nil || l2 != nil) {
		var l string
		var ok bool
		select {
		case l, ok = <-l0:
			if !ok {
				l0 = nil
			}
		case l, ok = <-l2:
			if !ok {
				l2 = nil
			}
		case <-deadline:
			l0, l2 = nil, nil
		}
		if strings.Contains(l, "watchdog") {
			report = l
		}
	}
	took := time.Since(entered)
	children[1].cmd.Process.Signal(syscall.SIGCONT)
	t.Logf("after %v: %s", took.Round(time.Millisecond), report)
	if !strings.Contains(report, "rank 1 never entered it (its last: broadcast #1") {
		t.Errorf("no report naming rank 1 within %v (got %q)", took, report)
	}
	for r, c := range children {
		if !c.wait(30 * time.Second) {
			t.Fatalf("rank %d still running 30 s after SIGCONT", r)
		}
		if c.err != nil {
			t.Errorf("rank %d: %v\n%s", r, c.err, c.stderr.String())
		}
	}
}
