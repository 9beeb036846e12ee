package multihost

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"syscall"
	"testing"
	"time"
)

const rdzvPort = 29400

// testElastic runs an elastic job (--nnodes 1:2) on 2 hosts × 2 ranks,
// every rank looping on all-reduce. Host 1's launcher is killed with
// SIGKILL (its workers die with it): host 0's ranks see the dead peers,
// and the job goes on at world 2 in a new round, without counting a
// restart (--max-restarts 0). Host 1 then comes back and the job grows
// back to world 4. It measures the time from the kill to host 0 training
// again, with the default 5 s heartbeats; the goal is under 10 s.
func (s *suite) testElastic(t *testing.T) {
	tp := s.topology(t)
	b := newBell()
	token := tokenEnv()
	stop := filepath.Join(t.TempDir(), "stop")
	start := func(i int, name string) *launcher {
		args := []string{
			"--nnodes", "1:2", "--nproc-per-node", strconv.Itoa(nprocPerNode),
			"--rdzv-endpoint", fmt.Sprintf("%s:%d", tp.hosts[0].ip, rdzvPort), "--rdzv-id", "mh-elastic",
			"--max-restarts", "0", "--grace-period", "2s", "--join-timeout", "60s", "--verbose",
			"--", s.worker, "--mode", "loop", "--loop-for", "5m", "--timeout", "6m", "--stop-file", stop,
		}
		return startLauncher(t, b, name, s.cohort, tp.hosts[i], []string{token}, args...)
	}
	l0 := start(0, "host 0")
	l1 := start(1, "host 1")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dump := func() {
		for _, l := range []*launcher{l0, l1} {
			l.dump(t)
		}
	}
	if err := waitLooping(ctx, b, 4, 2, l0); err != nil {
		dump()
		t.Fatal(err)
	}
	if err := waitLooping(ctx, b, 4, 2, l1); err != nil {
		dump()
		t.Fatal(err)
	}
	if err := l1.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	l1.wait(t, 30*time.Second)
	if err := waitLooping(ctx, b, 2, 2, l0); err != nil {
		dump()
		t.Fatal(err)
	}
	resumed := time.Since(killed)
	t.Logf("host 1 killed → host 0 training at world 2: %v (default 5 s heartbeats)", resumed.Round(time.Millisecond))
	if resumed > 10*time.Second {
		t.Errorf("host 0 took %v to resume at world 2; want under 10 s", resumed.Round(time.Millisecond))
	}

	back := time.Now()
	l2 := start(1, "host 1 again")
	if err := waitLooping(ctx, b, 4, 2, l2); err != nil {
		l0.dump(t)
		l2.dump(t)
		t.Fatal(err)
	}
	if err := waitLooping(ctx, b, 4, 2, l0); err != nil {
		l0.dump(t)
		t.Fatal(err)
	}
	t.Logf("host 1 back → training at world 4: %v", time.Since(back).Round(time.Millisecond))

	if err := os.WriteFile(stop, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, l := range []*launcher{l0, l2} {
		if code := l.wait(t, jobTimeout); code != 0 {
			l.dump(t)
			t.Errorf("%s exited %d after the stop file, want 0", l.name, code)
		}
	}
	// No restart was counted: every LOOPING report says restart=0.
	for _, l := range []*launcher{l0, l2} {
		for _, line := range l.out.Lines() {
			if r, ok := parseReport(line); ok && r.kind == "LOOPING" && r.fields["restart"] != "0" {
				t.Errorf("%s: %q: a scale event was counted as a restart", l.name, line)
			}
		}
	}
}

// waitLooping waits until the launcher's output holds LOOPING reports at
// world from n ranks, each its newest report (so a world-4 report before
// a shrink does not count after it). Node ranks follow the order the
// launchers joined, so which ranks a host runs is not fixed.
func waitLooping(ctx context.Context, b *bell, world, n int, l *launcher) error {
	re := regexp.MustCompile(`^\[rank (\d+)\] LOOPING .*world=(\d+)`)
	for {
		wake := b.wait()
		latest := make(map[int]int) // rank → world of its newest report
		for _, line := range l.out.Lines() {
			if m := re.FindStringSubmatch(line); m != nil {
				r, _ := strconv.Atoi(m[1])
				w, _ := strconv.Atoi(m[2])
				latest[r] = w
			}
		}
		have := 0
		for _, w := range latest {
			if w == world {
				have++
			}
		}
		if have >= n {
			return nil
		}
		select {
		case <-l.done:
			return fmt.Errorf("%s exited before %d ranks looped at world %d (newest: %v)", l.name, n, world, latest)
		case <-wake:
		case <-ctx.Done():
			return fmt.Errorf("%s: %d ranks not looping at world %d: %w (newest: %v)", l.name, n, world, ctx.Err(), latest)
		}
	}
}
