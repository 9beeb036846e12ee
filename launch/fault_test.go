package launch

// The fault scenarios of issue 14 that the launcher owns, each re-run as
// real processes and timed (the time to a clear error is logged with
// -v). .ci/run's fault loop runs them with
//
//	go test ./launch -run 'TestFault' -count=1
//
// (about 15 s; -short skips the ones that build a program or flood).

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cohortml/cohort/distributed/rendezvous"
	"github.com/cohortml/cohort/launch/launchtest"
)

// startRun runs cfg in the background; the test waits for stdout to
// match ready before it acts.
func startRun(t *testing.T, cfg Config, ready *launchtest.Output) (errc <-chan error, started time.Time) {
	t.Helper()
	cfg.Stdout = ready
	ch := make(chan error, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	go func() { ch <- Run(ctx, cfg) }()
	waitReady(t, ready, ch)
	return ch, time.Now()
}

// waitReady waits up to 30 s for ready to match, failing t with the
// output so far when Run returns (on errc) first or the time runs out.
func waitReady(t *testing.T, ready *launchtest.Output, errc <-chan error) {
	t.Helper()
	select {
	case <-ready.Hit():
	case err := <-errc:
		t.Fatalf("Run returned before the workers were ready: %v\n%s", err, ready.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("workers not ready:\n%s", ready.String())
	}
}

// rankPID returns the pid rank printed ("[rank N] pid P").
func rankPID(t *testing.T, out string, rank int) int {
	t.Helper()
	m := regexp.MustCompile(fmt.Sprintf(`\[rank %d\] pid (\d+)`, rank)).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no pid for rank %d in:\n%s", rank, out)
	}
	pid, _ := strconv.Atoi(m[1])
	return pid
}

// TestFaultBlameSignalledRank: SIGTERM to rank 1 of a job whose ranks
// fail when a peer leaves (as a collective's abort notice makes them):
// rank 0 exits first, yet the launcher names rank 1 and SIGTERM, and lists
// rank 0 as a consequence. Rank 1 either exits 128+15 (rendezvous.Fail),
// exits 1 having recorded the signal in its error file, or dies by the
// signal.
func TestFaultBlameSignalledRank(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"exit143", []string{"peerabort"}, "128+SIGTERM"},
		{"exit1-errorfile", []string{"peerabort", "code1"}, "was stopped by SIGTERM (then exited with code 1)"},
		{"killed", []string{"exit", "9", "1"}, "was killed by signal 15 (SIGTERM)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg := testConfig(2, tc.args...)
			out := launchtest.Watch(`\] ready\n`, 2)
			errc, _ := startRun(t, cfg, out)
			start := time.Now()
			if err := syscall.Kill(rankPID(t, out.String(), 1), syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			err := <-errc
			took := time.Since(start)
			var we *WorkerError
			if !errors.As(err, &we) || we.Rank != 1 {
				t.Fatalf("Run = %v; want rank 1 blamed\nstdout:\n%s\nstderr:\n%s", err, out.String(), cfg.Stderr.(*launchtest.Output).String())
			}
			rep := we.Report()
			if !strings.Contains(rep, "rank 1 failed") || !strings.Contains(rep, tc.want) {
				t.Errorf("report does not name rank 1 and %q:\n%s", tc.want, rep)
			}
			if tc.args[0] == "peerabort" {
				if we.Record == nil || we.Record.Signal != "SIGTERM" || !strings.Contains(rep, "cancelled locally") {
					t.Errorf("report lacks rank 1's error file (signal SIGTERM, its message):\n%s", rep)
				}
				if len(we.Others) != 1 || !strings.HasPrefix(we.Others[0], "rank 0 exited with code 1") {
					t.Errorf("Others = %q; want rank 0's exit listed after rank 1", we.Others)
				}
			}
			if took > 10*time.Second {
				t.Errorf("took %v to name rank 1; want under 10 s", took)
			}
			t.Logf("SIGTERM to rank 1 → launcher names it after %v:\n%s", took.Round(time.Millisecond), rep)
			assertNoneAlive(t, out.String(), 2)
		})
	}
}

// TestFaultCtrlCBlamesNoRank: SIGINT to the launcher (Ctrl-C) while a
// worker got it first and its peers fail on its abort: the outcome is
// the signal, not a rank.
func TestFaultCtrlCBlamesNoRank(t *testing.T) {
	cfg := testConfig(2, "peerabort")
	sigs := make(chan os.Signal, 1)
	cfg.Signals = sigs
	out := launchtest.Watch(`\] waiting\n`, 2)
	errc, _ := startRun(t, cfg, out)
	start := time.Now()
	syscall.Kill(rankPID(t, out.String(), 1), syscall.SIGINT)
	sigs <- syscall.SIGINT
	err := <-errc
	var se *SignalError
	var we *WorkerError
	if !errors.As(err, &se) || se.Signal != syscall.SIGINT || errors.As(err, &we) {
		t.Fatalf("Run = %v; want a *SignalError for SIGINT and no rank blamed", err)
	}
	t.Logf("Ctrl-C → %v after %v", err, time.Since(start).Round(time.Millisecond))
}

// TestFaultRestartNamesRank: a restart names the rank that failed and
// its exit status.
func TestFaultRestartNamesRank(t *testing.T) {
	cfg := testConfig(2, "restart")
	cfg.Restart = MaxRestarts(1)
	_, stderr := runOK(t, cfg)
	if want := "rank 1 (local rank 1 on node 0, pid "; !strings.Contains(stderr, want) || !strings.Contains(stderr, "exited with code 3; restarting the workers (restart 1)") {
		t.Errorf("stderr does not name rank 1 and its status at the restart:\n%s", stderr)
	}
}

// TestFaultNotMainPackage: a library package is refused by name.
func TestFaultNotMainPackage(t *testing.T) {
	err, took := runModule(t, "lib", "lib.go", "package lib\n\nfunc F() {}\n")
	if err == nil || !strings.Contains(err.Error(), ". is not a main package (package lib)") {
		t.Fatalf("Run = %v; want \"not a main package (package lib)\"", err)
	}
	t.Logf("non-main package → %v after %v", err, took.Round(time.Millisecond))
}

// waitCmd starts cmd and waits up to d for it to exit; past d it kills
// it and reports timedOut (err is then the killed process's).
func waitCmd(t *testing.T, cmd *exec.Cmd, d time.Duration) (err error, timedOut bool) {
	t.Helper()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err = <-done:
		return err, false
	case <-time.After(d):
		cmd.Process.Kill()
		return <-done, true
	}
}

// TestFaultLogDir: --log-dir keeps each rank's output and error file;
// without --tee the console gets none of it, with --tee both do; the
// failure report quotes the error file.
func TestFaultLogDir(t *testing.T) {
	for _, tee := range []bool{false, true} {
		t.Run("tee="+strconv.FormatBool(tee), func(t *testing.T) {
			t.Parallel()
			cfg := testConfig(2, "peerabort")
			cfg.LogDir, cfg.Tee, cfg.RunID = t.TempDir(), tee, "job1"
			ready := launchtest.Watch(`pid \d+\n`, 0) // console may stay silent
			errc, _ := startRun(t, cfg, ready)
			dir := filepath.Join(cfg.LogDir, "job1", "attempt_0")
			var pid int
			waitFile(t, func() bool {
				b, _ := os.ReadFile(filepath.Join(dir, "1", "stdout.log"))
				if m := regexp.MustCompile(`(?m)^pid (\d+)\n(?s:.*)waiting`).FindSubmatch(b); m != nil {
					pid, _ = strconv.Atoi(string(m[1]))
					return true
				}
				return false
			})
			syscall.Kill(pid, syscall.SIGTERM)
			err := <-errc
			var we *WorkerError
			if !errors.As(err, &we) || we.Rank != 1 {
				t.Fatalf("Run = %v; want rank 1 blamed", err)
			}
			if want := filepath.Join(dir, "1", "stderr.log"); we.StderrLog != want || !strings.Contains(we.Report(), want) {
				t.Errorf("report should point at %s:\n%s", want, we.Report())
			}
			for r := range 2 {
				b, err := os.ReadFile(filepath.Join(dir, strconv.Itoa(r), "stdout.log"))
				if err != nil || !strings.Contains(string(b), "ready\n") || strings.Contains(string(b), "[rank") {
					t.Errorf("rank %d stdout.log = %q, %v; want its unprefixed output", r, b, err)
				}
				rec, err := rendezvous.ReadErrorFile(filepath.Join(dir, strconv.Itoa(r), "error.json"))
				if err != nil || !strings.Contains(rec.Message, "all_reduce") {
					t.Errorf("rank %d error.json: %+v, %v", r, rec, err)
				}
			}
			console := ready.String()
			if got := strings.Contains(console, "[rank 0] ready"); got != tee {
				t.Errorf("console has the workers' output: %v; want %v:\n%s", got, tee, console)
			}
		})
	}
}

func waitFile(t *testing.T, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatal("timed out waiting for the workers' log files")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

var (
	initWorkerOnce sync.Once
	initWorkerBin  string
	initWorkerErr  error
)

// buildInitWorker builds testdata/initworker (a dist program) once.
func buildInitWorker(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds a dist program")
	}
	initWorkerOnce.Do(func() {
		initWorkerBin = filepath.Join(filepath.Dir(workerBin), "initworker")
		initWorkerErr = launchtest.Build(filepath.Dir(workerBin), "./testdata/initworker")
	})
	if initWorkerErr != nil {
		t.Fatal(initWorkerErr)
	}
	return initWorkerBin
}

// TestFaultTimeoutMissingRank: COHORT_TIMEOUT=5s and a rank that never
// starts: the rank that did exits non-zero within 15 s naming the missing
// one. Run without a launcher (torchrun's variables by hand: rank 0
// serves the store, or is the one missing) and under Run with
// Config.Timeout (what cohort run --timeout sets).
func TestFaultTimeoutMissingRank(t *testing.T) {
	bin := buildInitWorker(t)
	for _, tc := range []struct {
		name          string
		rank, missing int
		want          string
	}{
		{"rank1-missing", 0, 1, "rank 1"},
		{"rank0-missing", 1, 0, "is rank 0 running"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cmd := exec.Command(bin)
			cmd.Env = append(os.Environ(), "RANK="+strconv.Itoa(tc.rank), "WORLD_SIZE=2", "MASTER_ADDR=127.0.0.1",
				"MASTER_PORT="+strconv.Itoa(freePort(t)), "COHORT_TIMEOUT=5s", "COHORT_RENDEZVOUS=torchrun",
				"COHORT_STORE_ADDR=", "COHORT_TOKEN=", "COHORT_RUN_ID=", "COHORT_PROGRESS=off")
			var stderr strings.Builder
			cmd.Stderr = &stderr
			start := time.Now()
			err, timedOut := waitCmd(t, cmd, 30*time.Second)
			if timedOut {
				t.Fatalf("rank %d still running after 30 s:\n%s", tc.rank, stderr.String())
			}
			took := time.Since(start)
			if err == nil || !strings.Contains(stderr.String(), tc.want) {
				t.Fatalf("rank %d: %v; want a failure naming %q:\n%s", tc.rank, err, tc.want, stderr.String())
			}
			if took > 15*time.Second || took < 4*time.Second {
				t.Errorf("rank %d failed after %v; want about the 5 s timeout (under 15 s)", tc.rank, took)
			}
			t.Logf("COHORT_TIMEOUT=5s, rank %d never starts → rank %d exits (%v) after %v:\n%s", tc.missing, tc.rank, err, took.Round(time.Millisecond), stderr.String())
		})
	}
	t.Run("launcher", func(t *testing.T) {
		t.Parallel()
		cfg := testConfig(2, "late", "1")
		cfg.Program, cfg.Timeout = bin, 5*time.Second
		cfg.Env = append(cfg.Env, "COHORT_PROGRESS=off")
		err, took := run(t, cfg)
		var we *WorkerError
		if !errors.As(err, &we) || we.Rank != 0 || we.Record == nil || !strings.Contains(we.Record.Message, "rank 1") {
			t.Fatalf("Run = %v; want rank 0's failure, its error file naming rank 1\n%s", err, cfg.Stderr.(*launchtest.Output).String())
		}
		if took > 15*time.Second {
			t.Errorf("Run took %v; want under 15 s", took)
		}
		t.Logf("cohort run --timeout 5s, rank 1 never joins → after %v:\n%s", took.Round(time.Millisecond), we.Report())
	})
}

const floodAgentEnv = "LAUNCH_TEST_FLOOD_AGENT"

// runFloodAgent is the launcher of TestFaultStoreFlood, in a child process
// under a 1,024-fd limit (ulimit -n 1024): spec is "PORT WORKER-BINARY".
// It logs at Info level (cohort run --verbose) to stderr and never returns.
func runFloodAgent(spec string) {
	port, bin, _ := strings.Cut(spec, " ")
	p, _ := strconv.Atoi(port)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: 1024, Max: 1024}); err != nil {
		fmt.Fprintln(os.Stderr, "flood agent: setrlimit:", err)
		os.Exit(2)
	}
	err := Run(context.Background(), Config{
		NProcPerNode: 2, Program: bin, Args: []string{"slow", "1500"}, Env: os.Environ(), MasterPort: p,
		Stdout: os.Stdout, Stderr: os.Stderr, GracePeriod: 2 * time.Second, JoinTimeout: 30 * time.Second,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})),
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "flood agent:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// TestFaultStoreFlood: 3,000 connections that never finish the handshake,
// redialled as the store drops them, flood the launcher's store while the
// workers join; the launcher runs under a 1,024-fd limit. The job still
// starts and ends within its timeout, and the launcher's log (Info level)
// stays under 100 lines. It takes about 3 s of both cores (skipped with
// -short).
func TestFaultStoreFlood(t *testing.T) {
	if testing.Short() {
		t.Skip("floods a store with 3,000 connections")
	}
	const conns = 3000
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil || lim.Max < conns+200 {
		t.Skipf("the flood needs %d fds in the test process (limit %+v, %v)", conns+200, lim, err)
	}
	if lim.Cur < conns+200 {
		raised := lim
		raised.Cur = lim.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &raised); err != nil {
			t.Skip(err)
		}
		t.Cleanup(func() { syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim) })
	}
	port := freePort(t)
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), floodAgentEnv+"="+strconv.Itoa(port)+" "+workerBin)
	var stdout, stderr launchtest.Output
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}

	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var dials, drops atomic.Int64
	for range conns {
		wg.Go(func() {
			d := net.Dialer{Timeout: time.Second}
			for ctx.Err() == nil {
				c, err := d.DialContext(ctx, "tcp", addr)
				if err != nil {
					select { // the store is not up yet, or its backlog is full
					case <-time.After(20 * time.Millisecond):
					case <-ctx.Done():
					}
					continue
				}
				dials.Add(1)
				done := context.AfterFunc(ctx, func() { c.Close() })
				c.Read(make([]byte, 1)) // hold it, silent, until the store drops it
				done()
				c.Close()
				drops.Add(1)
				select {
				case <-time.After(20 * time.Millisecond):
				case <-ctx.Done():
				}
			}
		})
	}
	t.Cleanup(func() { stop(); wg.Wait() })

	start := time.Now()
	err, timedOut := waitCmd(t, cmd, 60*time.Second)
	if timedOut {
		t.Errorf("the job did not finish within 60 s")
	}
	took := time.Since(start)
	stop()
	wg.Wait()
	log := stderr.String()
	lines := strings.Count(log, "\n")
	if err != nil || !strings.Contains(stdout.String(), "[rank 0] ready") || !strings.Contains(stdout.String(), "[rank 1] ready") {
		t.Fatalf("job under flood: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), log)
	}
	if lines >= 100 {
		t.Errorf("the launcher wrote %d log lines under the flood; want < 100:\n%s", lines, log)
	}
	t.Logf("%d flooding connections (%d dials, %d dropped by the store), launcher at 1,024 fds: job done in %v (workers join after 1.5 s), %d log lines:\n%s",
		conns, dials.Load(), drops.Load(), took.Round(time.Millisecond), lines, log)
}
