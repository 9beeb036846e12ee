package launch

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestRunSignalDuringStart: a signal that comes while the launcher starts
// its workers stops the start at once: no more workers are started, the
// job ends as a *SignalError within a second.
func TestRunSignalDuringStart(t *testing.T) {
	cfg := testConfig(200, "signal")
	sigs := make(chan os.Signal, 1)
	cfg.Signals = sigs
	c := cfg.withDefaults()
	a := &agent{cfg: c, log: c.Logger, out: &lineWriter{w: c.Stdout}, errOut: &lineWriter{w: c.Stderr}}
	defer a.cleanup()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := a.prepare(ctx); err != nil {
		t.Fatal(err)
	}
	sigs <- syscall.SIGTERM // arrives as spawn begins
	start := time.Now()
	err := a.supervise(ctx)
	took := time.Since(start)
	var se *SignalError
	if !errors.As(err, &se) || se.Signal != syscall.SIGTERM {
		t.Fatalf("supervise = %v; want a *SignalError for SIGTERM", err)
	}
	if len(a.workers) != 0 || len(se.Workers) != 0 {
		t.Errorf("%d workers started after the signal; want 0", len(a.workers))
	}
	if took > time.Second {
		t.Errorf("the signal took %v to stop the start", took)
	}
	if r := se.Report(); !strings.Contains(r, "before any worker started") {
		t.Errorf("report %q", r)
	}
}

// TestMonitorNotStarted: workers a signal kept from starting count as
// gone, so the stop ends when the started ones exit.
func TestMonitorNotStarted(t *testing.T) {
	m := newMonitor(5, nil, func(local int, st ExitStatus) *WorkerError { return &WorkerError{Rank: local, Status: st} })
	m.notStarted(2)
	if acts := m.handle(event{kind: evSignal, sig: syscall.SIGTERM}); len(acts) != 2 || acts[0].kind != actSignal || acts[1].kind != actArm {
		t.Fatalf("signal: actions %v; want signal, arm", acts)
	}
	term := ExitStatus{Code: 143}
	if acts := m.handle(event{kind: evExit, local: 0, status: term}); len(acts) != 0 {
		t.Fatalf("first exit: actions %v; want none", acts)
	}
	if acts := m.handle(event{kind: evExit, local: 1, status: term}); len(acts) != 1 || acts[0].kind != actFinish {
		t.Fatalf("last started worker's exit: actions %v; want finish", acts)
	}
	m = newMonitor(3, nil, nil)
	m.notStarted(0)
	if acts := m.handle(event{kind: evSignal, sig: syscall.SIGINT}); len(acts) != 1 || acts[0].kind != actFinish {
		t.Fatalf("no worker started: actions %v; want finish", acts)
	}
}

// TestRunErrorLineFirst: a worker's flag error, followed by more usage
// than the tail keeps, is named first in the report.
func TestRunErrorLineFirst(t *testing.T) {
	cfg := testConfig(1, "usage")
	err, _ := run(t, cfg)
	var we *WorkerError
	if !errors.As(err, &we) {
		t.Fatalf("Run = %v; want a *WorkerError", err)
	}
	const cause = "flag provided but not defined: -epoch"
	if we.Cause != cause {
		t.Errorf("Cause = %q; want %q", we.Cause, cause)
	}
	r := we.Report()
	i, j := strings.Index(r, "its error line: "+cause), strings.Index(r, "last 20 lines")
	if i < 0 || j < 0 || i > j {
		t.Errorf("report does not put the error line before the tail:\n%s", r)
	}
}

// TestSignalErrorReport: how each worker ended after a signal, and what
// it recorded.
func TestSignalErrorReport(t *testing.T) {
	e := &SignalError{Signal: syscall.SIGTERM, Workers: []WorkerStop{
		{Rank: 0, Status: ExitStatus{Code: 143}, Message: "distributed: stopped by SIGTERM after step 7; checkpoint saved in ck"},
		{Rank: 1, Status: ExitStatus{Code: -1, Signal: syscall.SIGKILL}, Message: "stopped by SIGTERM"},
	}}
	want := "stopped by SIGTERM, forwarded to the workers:\n" +
		"  rank 0 exited with code 143 (128+SIGTERM: it was stopped by that signal): distributed: stopped by SIGTERM after step 7; checkpoint saved in ck\n" +
		"  rank 1 was killed (SIGKILL): it did not stop within the grace period, or a second signal came: stopped by SIGTERM\n"
	if got := e.Report(); got != want {
		t.Errorf("Report:\n%s\nwant:\n%s", got, want)
	}
	if e.ExitCode() != 143 {
		t.Errorf("ExitCode %d", e.ExitCode())
	}
}

// TestReclaimTempDirs: the directories of dead launchers of this PID
// namespace are removed; live ones, other kinds, other namespaces and
// other names stay.
func TestReclaimTempDirs(t *testing.T) {
	dir := t.TempDir()
	live := map[int]bool{100: true}
	names := map[string]bool{ // name: reclaimed
		"cohort-run-errors-7-100-abc": false, // alive
		"cohort-run-errors-7-200-abc": true,  // dead
		"cohort-run-errors-7-300-":    true,  // dead, empty suffix
		"cohort-run-errors-8-200-abc": false, // another namespace
		"cohort-run-build-7-200-abc":  false, // another kind
		"cohort-run-errors-7-x-abc":   false, // no pid
		"cohort-run-errors-abc":       false, // an older launcher's: no owner
	}
	for name := range names {
		if err := os.MkdirAll(filepath.Join(dir, name, "attempt_0"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	removed := reclaimTempDirs(dir, "errors", "7", func(pid int) bool { return live[pid] })
	for name, gone := range names {
		_, err := os.Stat(filepath.Join(dir, name))
		if exists := err == nil; exists == gone {
			t.Errorf("%s: exists %v; want reclaimed %v", name, exists, gone)
		}
	}
	if len(removed) != 2 {
		t.Errorf("removed %q; want 2", removed)
	}
	// This process is alive: its own directory stays.
	d, err := makeTempDir("errors")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(d)
	if !strings.Contains(filepath.Base(d), "-"+strconv.Itoa(os.Getpid())+"-") {
		t.Errorf("%s does not name this process", d)
	}
	if got := reclaimTempDirs(filepath.Dir(d), "errors", pidNamespace(), processAlive); len(got) > 0 {
		for _, g := range got {
			if g == d {
				t.Errorf("reclaimed a live launcher's directory %s", d)
			}
		}
	}
}

// TestErrorLine: the lines a failing Go program states its error in.
func TestErrorLine(t *testing.T) {
	for line, want := range map[string]bool{
		"panic: runtime error: index out of range [5] with length 3": true,
		"fatal error: all goroutines are asleep - deadlock!":         true,
		"flag provided but not defined: -epoch":                      true,
		`invalid value "x" for flag -lr: parse error`:                true,
		"flag needs an argument: -steps":                             true,
		"goroutine 1 [running]:":                                     false,
		"step 5: train loss 2.5":                                     false,
	} {
		if got := errorLine([]byte(line)); got != want {
			t.Errorf("errorLine(%q) = %v; want %v", line, got, want)
		}
	}
	tl := newTail(2)
	for _, l := range []string{"loading", "panic: boom", "", "goroutine 1 [running]:", "panic: later"} {
		tl.add([]byte(l))
	}
	if got := tl.errorCause(); got != "panic: boom" {
		t.Errorf("errorCause = %q; want the first panic line", got)
	}
}
