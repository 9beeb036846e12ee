package multihost

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cohortml/cohort/launch/launchtest"
)

// bell wakes everyone waiting on it when it rings: the launchers of one
// test ring it on every write to their output and when they exit.
type bell struct {
	mu sync.Mutex
	ch chan struct{}
}

func newBell() *bell { return &bell{ch: make(chan struct{})} }

// ring wakes the current waiters.
func (b *bell) ring() {
	b.mu.Lock()
	defer b.mu.Unlock()
	close(b.ch)
	b.ch = make(chan struct{})
}

// wait returns a channel closed at the next ring.
func (b *bell) wait() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.ch
}

// launcher is one `cohort run` started inside a host's namespace.
type launcher struct {
	name        string
	cmd         *exec.Cmd
	out, errOut *launchtest.Output
	done        chan struct{} // closed once the process exited and was reaped
	err         error         // cmd.Wait's result, valid after done
	exitedAt    time.Time
}

// startLauncher runs `cohort run ARGS` in h's namespace with a minimal
// environment plus extra ("K=V"). It registers a cleanup that kills the
// launcher if it is still running and waits for it. The launcher also
// gets SIGKILL if this test process dies (parent-death signal), and its
// own workers die with it the same way. Its output lines and its exit
// ring b.
func startLauncher(t *testing.T, b *bell, name, cohortBin string, h host, extra []string, args ...string) *launcher {
	t.Helper()
	cmd := exec.Command("ip", append([]string{"netns", "exec", h.ns, cohortBin, "run"}, args...)...)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH")}, extra...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	l := &launcher{name: name, cmd: cmd, out: &launchtest.Output{Notify: b.ring}, errOut: &launchtest.Output{Notify: b.ring}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = l.out, l.errOut
	cmd.WaitDelay = 5 * time.Second // bounds the output copy if something keeps the pipes
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", name, err)
	}
	go func() {
		l.err = cmd.Wait()
		l.exitedAt = time.Now()
		close(l.done)
		b.ring()
	}()
	t.Cleanup(func() {
		select {
		case <-l.done:
		default:
			cmd.Process.Kill() // by the pid this test started
			<-l.done
		}
	})
	return l
}

// wait waits for the launcher to exit, at most d, and returns its exit
// code (-1 if killed by a signal); it fails the test on timeout.
func (l *launcher) wait(t *testing.T, d time.Duration) int {
	t.Helper()
	select {
	case <-l.done:
	case <-time.After(d):
		t.Fatalf("%s still running after %v\nstdout:\n%s\nstderr:\n%s", l.name, d, l.out, l.errOut)
	}
	var ee *exec.ExitError
	switch {
	case l.err == nil:
		return 0
	case errors.As(l.err, &ee):
		return ee.ExitCode()
	default:
		t.Fatalf("%s: %v", l.name, l.err)
		return -1
	}
}

// dump logs everything the launcher wrote.
func (l *launcher) dump(t *testing.T) {
	t.Helper()
	t.Logf("%s stdout:\n%s\n%s stderr:\n%s", l.name, l.out, l.name, l.errOut)
}

// report is one worker report line: "[rank N] KIND k=v k=v …".
type report struct {
	rank   int
	kind   string
	fields map[string]string
}

// parseReport parses a launcher output line; ok is false for other lines.
func parseReport(line string) (report, bool) {
	rest, ok := strings.CutPrefix(line, "[rank ")
	if !ok {
		return report{}, false
	}
	num, rest, ok := strings.Cut(rest, "] ")
	if !ok {
		return report{}, false
	}
	rank, err := strconv.Atoi(num)
	if err != nil {
		return report{}, false
	}
	f := strings.Fields(rest)
	if len(f) == 0 || strings.ToUpper(f[0]) != f[0] {
		return report{}, false
	}
	r := report{rank: rank, kind: f[0], fields: make(map[string]string)}
	for _, kv := range f[1:] {
		k, v, _ := strings.Cut(kv, "=")
		r.fields[k] = v
	}
	if r.fields["rank"] != num {
		return report{}, false // not a worker report (a stray line that looks like one)
	}
	return r, true
}

// reports returns the kind reports found in lines, by rank (the last one
// wins).
func reports(lines []string, kind string) map[int]report {
	m := make(map[int]report)
	for _, line := range lines {
		if r, ok := parseReport(line); ok && r.kind == kind {
			m[r.rank] = r
		}
	}
	return m
}

// waitReports waits until the launchers' stdout together holds a kind
// report from each of ranks, and returns them. It gives up when ctx ends
// or a launcher exits without them.
func waitReports(ctx context.Context, b *bell, kind string, ranks []int, ls ...*launcher) (map[int]report, error) {
	for {
		wake := b.wait() // before looking, so no line is missed
		all := make(map[int]report)
		exited := []string{}
		for _, l := range ls {
			select { // before reading: after done, all output is in
			case <-l.done:
				exited = append(exited, l.name)
			default:
			}
			for r, rep := range reports(l.out.Lines(), kind) {
				all[r] = rep
			}
		}
		missing := []int{}
		for _, r := range ranks {
			if _, ok := all[r]; !ok {
				missing = append(missing, r)
			}
		}
		switch {
		case len(missing) == 0:
			return all, nil
		case len(exited) > 0:
			return nil, fmt.Errorf("no %s report from ranks %v before %v exited", kind, missing, exited)
		}
		select {
		case <-wake:
		case <-ctx.Done():
			return nil, fmt.Errorf("no %s report from ranks %v: %w", kind, missing, ctx.Err())
		}
	}
}

// workerAlive reports whether pid is still a running process of the
// worker binary bin (a pid reused by some other program does not count).
func workerAlive(pid int, bin string) bool {
	exe, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/exe")
	return err == nil && exe == bin
}

// killWorkerOnCleanup makes sure the worker pid, if it is still the
// worker binary, is gone when the test ends.
func killWorkerOnCleanup(t *testing.T, pid int, bin string) {
	t.Cleanup(func() {
		if workerAlive(pid, bin) {
			t.Errorf("worker pid %d still running at the end of the test; killing it", pid)
			syscall.Kill(pid, syscall.SIGKILL)
		}
	})
}
