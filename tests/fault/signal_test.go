package fault

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cohortml/cohort/checkpoint"
	"github.com/cohortml/cohort/launch/launchtest"
)

// The signal table: SIGINT and SIGTERM to examples/gpt alone, to one
// worker of `cohort run --nproc-per-node 2`, and to the launcher; a
// second SIGINT; a SIGTERM while the launcher starts many workers. Each
// row logs the time from the signal to the exit, and whether the
// checkpoint was written and then loaded on resume; after a SIGTERM the
// resumed run's final weights equal, bit for bit, an uninterrupted run's.

// gptArgs is a short GPT-mini run: small batches, no intermediate
// validation, a training-loss line every 5 steps.
func gptArgs(steps int, ckpt, save string) []string {
	args := []string{"-steps", strconv.Itoa(steps), "-batch", "4", "-log-every", "5", "-eval-every", "0", "-seed", "3"}
	if ckpt != "" {
		args = append(args, "-checkpoint-dir", ckpt)
	}
	if save != "" {
		args = append(args, "-save", save)
	}
	return args
}

// signalBins are the cohort CLI and the GPT example, built once for the
// signal tests into a directory TestMain removes.
var signalBins struct {
	once        sync.Once
	dir         string
	cohort, gpt string
	err         error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if signalBins.dir != "" {
		os.RemoveAll(signalBins.dir)
	}
	os.Exit(code)
}

// buildSignalBins returns the paths of the built cohort CLI and GPT
// example.
func buildSignalBins(t *testing.T) (cohort, gpt string) {
	t.Helper()
	b := &signalBins
	b.once.Do(func() {
		if b.dir, b.err = os.MkdirTemp("", "cohort-signal-test-"); b.err != nil {
			return
		}
		b.cohort, b.gpt = filepath.Join(b.dir, "cohort"), filepath.Join(b.dir, "gpt")
		b.err = launchtest.Build(b.dir, "github.com/cohortml/cohort/cmd/cohort", "github.com/cohortml/cohort/examples/gpt")
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.cohort, b.gpt
}

// proc is a started program.
type proc struct {
	cmd            *exec.Cmd
	stdout, stderr *launchtest.Output
	done           <-chan struct{}
	exited         time.Time
}

func startProc(t *testing.T, env []string, bin string, args ...string) *proc {
	t.Helper()
	p := &proc{cmd: exec.Command(bin, args...), stdout: &launchtest.Output{}, stderr: &launchtest.Output{}}
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdout, p.cmd.Stderr = p.stdout, p.stderr
	p.done = launchtest.Start(t, p.cmd, func(error) { p.exited = time.Now() })
	return p
}

// waitFor waits up to d for pattern in s; it fails the test if the
// process exits first or the time runs out.
func (p *proc) waitFor(t *testing.T, s *launchtest.Output, pattern string, d time.Duration) {
	t.Helper()
	if err := s.Wait(regexp.MustCompile(pattern), 1, p.done, d); err != nil {
		t.Fatalf("%s: %v\nstdout:\n%s\nstderr:\n%s", p.cmd.Path, err, p.stdout, p.stderr)
	}
}

// exit waits up to d for the process to end and returns its exit code
// and when it ended.
func (p *proc) exit(t *testing.T, d time.Duration) (int, time.Time) {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(d):
		t.Fatalf("%s still running %v later\nstdout:\n%s\nstderr:\n%s", p.cmd.Path, d, p.stdout, p.stderr)
	}
	return p.cmd.ProcessState.ExitCode(), p.exited
}

// signal sends sig to the process and returns when.
func (p *proc) signal(t *testing.T, sig syscall.Signal) time.Time {
	t.Helper()
	at := time.Now()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("signal %v: %v", sig, err)
	}
	return at
}

// rankPID returns the pid of the launcher's worker with RANK=rank.
func rankPID(t *testing.T, launcher int, rank int) int {
	t.Helper()
	pid, ok := launchtest.ChildWithEnv(launcher, "RANK="+strconv.Itoa(rank))
	if !ok {
		t.Fatalf("no worker of launcher %d has RANK=%d", launcher, rank)
	}
	return pid
}

var savedAt = regexp.MustCompile(`stopped by (SIG[A-Z]+)(?: \(received by another rank\))? after step (\d+); checkpoint saved in`)

// stoppedStep returns the step after which the run stopped, as its
// stderr says, and checks the checkpoint of that step exists.
func stoppedStep(t *testing.T, stderr, ckpt string, sig string) int {
	t.Helper()
	m := savedAt.FindStringSubmatch(stderr)
	if m == nil || m[1] != sig {
		t.Fatalf("stderr does not say the run stopped by %s and saved:\n%s", sig, stderr)
	}
	step, _ := strconv.Atoi(m[2])
	if _, err := os.Stat(filepath.Join(ckpt, fmt.Sprintf("step-%010d", step))); err != nil {
		t.Fatalf("no checkpoint of step %d: %v", step, err)
	}
	return step
}

// equalWeights compares two safetensors files bit for bit.
func equalWeights(t *testing.T, got, want string) {
	t.Helper()
	w, g := weights(t, want), weights(t, got)
	if len(w) == 0 || len(g) != len(w) {
		t.Fatalf("%s has %d tensors, %s %d", got, len(g), want, len(w))
	}
	for name, wv := range w {
		gv := g[name]
		if len(gv) != len(wv) {
			t.Fatalf("%s: %d values, want %d", name, len(gv), len(wv))
		}
		for i := range wv {
			if gv[i] != wv[i] {
				t.Fatalf("%s[%d] = %v after the stop and resume; uninterrupted %v", name, i, gv[i], wv[i])
			}
		}
	}
}

func skipUnlessSoak(t *testing.T) {
	t.Helper()
	if os.Getenv("COHORT_SOAK") == "" {
		t.Skip("set COHORT_SOAK=1 to run the signal table (about a minute: it builds and runs GPT-mini jobs)")
	}
}

// TestSignalTable runs the table's rows; each resumes from the checkpoint
// the stop wrote, and the SIGTERM rows compare the final weights with an
// uninterrupted run's.
func TestSignalTable(t *testing.T) {
	skipUnlessSoak(t)
	cohort, gpt := buildSignalBins(t)
	const steps = 60
	refRoot := t.TempDir()
	refs := map[int]string{} // world: the uninterrupted run's weights
	reference := func(t *testing.T, world int) string {
		if r, ok := refs[world]; ok {
			return r
		}
		dir := filepath.Join(refRoot, strconv.Itoa(world))
		save := filepath.Join(dir, "final.safetensors")
		var p *proc
		if world == 1 {
			p = startProc(t, nil, gpt, gptArgs(steps, filepath.Join(dir, "ckpt"), save)...)
		} else {
			p = startProc(t, nil, cohort, append([]string{"run", "--nproc-per-node", strconv.Itoa(world), gpt}, gptArgs(steps, filepath.Join(dir, "ckpt"), save)...)...)
		}
		if code, _ := p.exit(t, 3*time.Minute); code != 0 {
			t.Fatalf("uninterrupted run (world %d): exit %d\n%s", world, code, p.stderr)
		}
		refs[world] = save
		return save
	}

	for _, row := range []struct {
		name   string
		sig    syscall.Signal
		world  int
		target string // "worker" (the program itself, or rank 1 under cohort run) or "launcher"
		code   int    // the exit code of what was started
	}{
		{"gpt/SIGINT", syscall.SIGINT, 1, "worker", 130},
		{"gpt/SIGTERM", syscall.SIGTERM, 1, "worker", 143},
		{"cohort-run/rank1/SIGINT", syscall.SIGINT, 2, "worker", 1},
		{"cohort-run/rank1/SIGTERM", syscall.SIGTERM, 2, "worker", 1},
		{"cohort-run/launcher/SIGINT", syscall.SIGINT, 2, "launcher", 130},
		{"cohort-run/launcher/SIGTERM", syscall.SIGTERM, 2, "launcher", 143},
	} {
		t.Run(row.name, func(t *testing.T) {
			dir := t.TempDir()
			ckpt, save := filepath.Join(dir, "ckpt"), filepath.Join(dir, "final.safetensors")
			args := gptArgs(steps, ckpt, save)
			start := func() *proc {
				if row.world == 1 {
					return startProc(t, nil, gpt, args...)
				}
				return startProc(t, nil, cohort, append([]string{"run", "--nproc-per-node", strconv.Itoa(row.world), gpt}, args...)...)
			}
			p := start()
			p.waitFor(t, p.stdout, `step 5: train loss`, 2*time.Minute)
			var at time.Time
			switch {
			case row.world == 1 || row.target == "launcher":
				at = p.signal(t, row.sig)
			default:
				pid := rankPID(t, p.cmd.Process.Pid, 1)
				at = time.Now()
				if err := syscall.Kill(pid, row.sig); err != nil {
					t.Fatal(err)
				}
			}
			code, ended := p.exit(t, time.Minute)
			took := ended.Sub(at)
			if code != row.code {
				t.Fatalf("exit code %d; want %d\nstdout:\n%s\nstderr:\n%s", code, row.code, p.stdout, p.stderr)
			}
			name := map[syscall.Signal]string{syscall.SIGINT: "SIGINT", syscall.SIGTERM: "SIGTERM"}[row.sig]
			step := stoppedStep(t, p.stderr.String(), ckpt, name)
			if step >= steps {
				t.Fatalf("the run ended (step %d) before the signal acted", step)
			}
			switch {
			case row.target == "launcher":
				// The launcher's report: every rank stopped after the same
				// step and saved.
				for r := range row.world {
					if !regexp.MustCompile(fmt.Sprintf(`rank %d exited with code %d .*: distributed: stopped by %s after step %d; checkpoint saved`, r, row.code, name, step)).MatchString(p.stderr.String()) {
						t.Errorf("the report lacks rank %d's stop after step %d:\n%s", r, step, p.stderr)
					}
				}
			case row.world > 1:
				// The report names rank 1, which the signal reached; rank 0
				// stopped with it.
				rep := p.stderr.String()
				if !strings.Contains(rep, "rank 1 failed") || !regexp.MustCompile(fmt.Sprintf(`its error .*stopped by %s after step %d; checkpoint saved`, name, step)).MatchString(rep) ||
					!regexp.MustCompile(fmt.Sprintf(`after it: rank 0 exited with code %d .*stopped by %s \(received by another rank\) after step %d; checkpoint saved`, 128+int(row.sig), name, step)).MatchString(rep) {
					t.Errorf("the report does not name rank 1 and its stop, then rank 0's:\n%s", rep)
				}
			}

			// Resume: the checkpoint is loaded and the run ends as an
			// uninterrupted one.
			r := start()
			rcode, _ := r.exit(t, 3*time.Minute)
			if rcode != 0 {
				t.Fatalf("resumed run: exit %d\n%s", rcode, r.stderr)
			}
			loaded := strings.Contains(r.stdout.String(), fmt.Sprintf("resumed at step %d from", step))
			if !loaded {
				t.Fatalf("the resumed run did not load step %d:\n%s", step, r.stdout)
			}
			equal := "not compared"
			if row.sig == syscall.SIGTERM {
				equalWeights(t, save, reference(t, row.world))
				equal = "equal, bit for bit"
			}
			t.Logf("%s to %s (world %d): exit %d %v after the signal; checkpoint of step %d written, loaded on resume; final weights %s",
				name, row.target, row.world, code, took.Round(time.Millisecond), step, equal)
		})
	}
}

// TestSignalSecondSIGINT: a second SIGINT, while the first one's step is
// still running, ends the process at once with 130.
func TestSignalSecondSIGINT(t *testing.T) {
	skipUnlessSoak(t)
	_, gpt := buildSignalBins(t)
	dir := t.TempDir()
	// Full batches: a step takes long enough to interrupt it.
	p := startProc(t, nil, gpt, "-steps", "100000", "-batch", "32", "-log-every", "1", "-eval-every", "0",
		"-checkpoint-dir", filepath.Join(dir, "ckpt"))
	p.waitFor(t, p.stdout, `step 2: train loss`, 2*time.Minute)
	first := p.signal(t, syscall.SIGINT)
	p.waitFor(t, p.stderr, `SIGINT: stopping after the step in flight`, 30*time.Second)
	second := p.signal(t, syscall.SIGINT)
	code, ended := p.exit(t, 30*time.Second)
	if code != 130 {
		t.Fatalf("exit %d; want 130\n%s", code, p.stderr)
	}
	if !strings.Contains(p.stderr.String(), "stopped at once by a second signal (SIGINT)") {
		t.Skipf("the first SIGINT's stop finished before the second signal came (%v apart):\n%s", second.Sub(first), p.stderr)
	}
	// The second signal may cut the first one's save short: what is left
	// is a complete checkpoint or none that counts, never a torn one.
	ckpt := "none complete"
	if path, _, err := checkpoint.Latest(filepath.Join(dir, "ckpt")); err == nil {
		ck, err := checkpoint.Open(path)
		if err != nil {
			t.Fatalf("the newest complete checkpoint %s does not open: %v", path, err)
		}
		ckpt = fmt.Sprintf("step %d complete", ck.Step())
		ck.Close()
	} else if !errors.Is(err, checkpoint.ErrNoCheckpoint) {
		t.Fatal(err)
	}
	t.Logf("second SIGINT %v after the first: exit 130 %v after it; checkpoint: %s", second.Sub(first).Round(time.Microsecond), ended.Sub(second).Round(time.Millisecond), ckpt)
}

// TestSignalLauncherStartup: SIGTERM while the launcher starts 1000
// workers is obeyed at once: no more are started, those started are
// stopped, the launcher exits 143.
func TestSignalLauncherStartup(t *testing.T) {
	skipUnlessSoak(t)
	cohort, _ := buildSignalBins(t)
	script := filepath.Join(t.TempDir(), "s.sh")
	if err := os.WriteFile(script, []byte("#!/bin/sh\necho up\nexec sleep 30\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	const n = 1000
	p := startProc(t, nil, cohort, "run", "--oversubscribe", "--nproc-per-node", strconv.Itoa(n), script)
	p.waitFor(t, p.stdout, `\[rank 0\] up`, time.Minute)
	at := p.signal(t, syscall.SIGTERM)
	code, ended := p.exit(t, 30*time.Second)
	took := ended.Sub(at)
	if code != 143 {
		t.Fatalf("exit %d; want 143\n%s", code, p.stderr)
	}
	started := "?"
	if m := regexp.MustCompile(`signal while starting the workers.* started=(\d+)`).FindStringSubmatch(p.stderr.String()); m != nil {
		started = m[1]
	}
	if took > 5*time.Second {
		t.Errorf("the launcher took %v to obey SIGTERM during the start", took)
	}
	t.Logf("SIGTERM during the start of %d workers: exit 143 %v after it; %s workers had been started", n, took.Round(time.Millisecond), started)
}

// TestSignalRefuseOversubscribe: more workers than CPUs are refused at
// once, naming the limit.
func TestSignalRefuseOversubscribe(t *testing.T) {
	skipUnlessSoak(t)
	cohort, gpt := buildSignalBins(t)
	start := time.Now()
	out, err := exec.Command(cohort, "run", "--nproc-per-node", "100000", gpt).CombinedOutput()
	took := time.Since(start)
	if err == nil || !strings.Contains(string(out), "--nproc-per-node 100000: more workers than the") {
		t.Fatalf("cohort run --nproc-per-node 100000: %v\n%s", err, out)
	}
	if took > time.Second {
		t.Errorf("refused after %v; want under 1 s", took)
	}
	t.Logf("--nproc-per-node 100000 refused in %v: %s", took.Round(time.Millisecond), strings.TrimSpace(string(out)))
}
