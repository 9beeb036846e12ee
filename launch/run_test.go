package launch

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cohortml/cohort/launch/launchtest"
)

// workerBin is testdata/worker, built once by TestMain.
var workerBin string

func TestMain(m *testing.M) {
	if spec := os.Getenv(agentEnv); spec != "" {
		runAgentProcess(spec) // a child agent of TestElasticProcessKill
	}
	if spec := os.Getenv(floodAgentEnv); spec != "" {
		runFloodAgent(spec) // the launcher of TestFaultStoreFlood
	}
	dir, err := os.MkdirTemp("", "launch-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	workerBin = filepath.Join(dir, "worker")
	if err := launchtest.Build(dir, "./testdata/worker"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func testConfig(nproc int, args ...string) Config {
	return Config{
		NProcPerNode: nproc,
		Program:      workerBin,
		Args:         args,
		Env:          append(os.Environ(), "EXTRA=kept", "RANK=99", "COHORT_RENDEZVOUS=slurm"),
		Stdout:       &launchtest.Output{},
		Stderr:       &launchtest.Output{},
		GracePeriod:  2 * time.Second,
	}
}

var pidLine = regexp.MustCompile(`\[rank (\d+)\] (pid|child) (\d+)`)

// pids returns every worker and grandchild pid printed in out.
func pids(t *testing.T, out string) []int {
	t.Helper()
	var ps []int
	for _, m := range pidLine.FindAllStringSubmatch(out, -1) {
		p, err := strconv.Atoi(m[3])
		if err != nil {
			t.Fatal(err)
		}
		ps = append(ps, p)
	}
	return ps
}

// alive reports whether pid is a live (non-zombie) process.
func alive(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// Field 3, after the parenthesised command name, is the state.
	i := bytes.LastIndexByte(stat, ')')
	return i < 0 || i+2 >= len(stat) || stat[i+2] != 'Z'
}

func assertNoneAlive(t *testing.T, out string, want int) {
	t.Helper()
	ps := pids(t, out)
	if len(ps) < want {
		t.Fatalf("found %d pids in the output, want at least %d:\n%s", len(ps), want, out)
	}
	// A killed process may take a moment to disappear from the table
	// after SIGKILL; give it a bounded moment.
	deadline := time.Now().Add(2 * time.Second)
	for _, p := range ps {
		for alive(p) {
			if time.Now().After(deadline) {
				t.Errorf("process %d is still alive after Run returned", p)
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// runOK runs cfg and returns the workers' output; it fails the test,
// showing the output, if Run fails.
func runOK(t *testing.T, cfg Config) (stdout, stderr string) {
	t.Helper()
	err, _ := run(t, cfg)
	stdout, stderr = cfg.Stdout.(*launchtest.Output).String(), cfg.Stderr.(*launchtest.Output).String()
	if err != nil {
		t.Fatalf("Run: %v\nstdout:\n%s\nstderr:\n%s", err, stdout, stderr)
	}
	return stdout, stderr
}

func run(t *testing.T, cfg Config) (error, time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	start := time.Now()
	err := Run(ctx, cfg)
	return err, time.Since(start)
}

func TestRunEnvContract(t *testing.T) {
	cfg := testConfig(2, "env")
	cfg.NumCPU = 5
	out, _ := runOK(t, cfg)
	vars := map[int]map[string]string{0: {}, 1: {}}
	line := regexp.MustCompile(`^\[rank (\d)\] ([A-Z_]+)=(.*)$`)
	for _, l := range strings.Split(out, "\n") {
		if m := line.FindStringSubmatch(l); m != nil {
			r, _ := strconv.Atoi(m[1])
			vars[r][m[2]] = m[3]
		}
	}
	for r := range 2 {
		v := vars[r]
		want := map[string]string{
			"RANK": strconv.Itoa(r), "LOCAL_RANK": strconv.Itoa(r), "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2",
			"GROUP_RANK": "0", "NODE_RANK": "0", "GROUP_WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1",
			"COHORT_RESTART_COUNT": "0", "COHORT_NUM_THREADS": "2", "OMP_NUM_THREADS": "2", "EXTRA": "kept",
		}
		for k, w := range want {
			if v[k] != w {
				t.Errorf("rank %d: %s=%q; want %q", r, k, v[k], w)
			}
		}
		if p, err := strconv.Atoi(v["MASTER_PORT"]); err != nil || p <= 0 {
			t.Errorf("rank %d: MASTER_PORT=%q; want a port", r, v["MASTER_PORT"])
		}
		if v["COHORT_STORE_ADDR"] != "127.0.0.1:"+v["MASTER_PORT"] {
			t.Errorf("rank %d: COHORT_STORE_ADDR=%q; want 127.0.0.1:MASTER_PORT", r, v["COHORT_STORE_ADDR"])
		}
		if len(v["COHORT_TOKEN"]) != 64 || len(v["COHORT_RUN_ID"]) != 16 {
			t.Errorf("rank %d: COHORT_TOKEN=%q COHORT_RUN_ID=%q; want 64 and 16 hex digits", r, v["COHORT_TOKEN"], v["COHORT_RUN_ID"])
		}
	}
	for _, k := range []string{"COHORT_TOKEN", "COHORT_RUN_ID", "MASTER_PORT"} {
		if vars[0][k] != vars[1][k] {
			t.Errorf("%s differs between ranks: %q vs %q", k, vars[0][k], vars[1][k])
		}
	}
	// The worker's own rendezvous.FromEnv accepted it (despite the
	// inherited RANK=99 and COHORT_RENDEZVOUS=slurm).
	for r := range 2 {
		want := fmt.Sprintf("[rank %d] info rank %d of 2 (local %d of 2, node 0 of 1, from torchrun)", r, r, r)
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestRunStreams(t *testing.T) {
	cfg := testConfig(2, "streams")
	stdout, stderr := runOK(t, cfg)
	for r := range 2 {
		out, errLine := fmt.Sprintf("[rank %d] to stdout\n", r), fmt.Sprintf("[rank %d] to stderr\n", r)
		if !strings.Contains(stdout, out) || strings.Contains(stdout, errLine) {
			t.Errorf("stdout should hold %q and not %q:\n%s", out, errLine, stdout)
		}
		if !strings.Contains(stderr, errLine) || strings.Contains(stderr, out) {
			t.Errorf("stderr should hold %q and not %q:\n%s", errLine, out, stderr)
		}
	}
	for _, l := range strings.Split(strings.TrimSpace(stdout), "\n") {
		if !regexp.MustCompile(`^\[rank \d\] `).MatchString(l) {
			t.Errorf("stdout line without a rank prefix: %q", l)
		}
	}
}

// TestRunWorkerExits3 is the must-show: a worker exits 3, cohort run
// fails within 10 s naming the rank, with the tail of its stderr, and no
// worker or grandchild survives.
func TestRunWorkerExits3(t *testing.T) {
	before := runtime.NumGoroutine()
	cfg := testConfig(3, "exit", "1", "3")
	err, took := run(t, cfg)
	out := cfg.Stdout.(*launchtest.Output).String()
	var we *WorkerError
	if !errors.As(err, &we) {
		t.Fatalf("Run = %v; want a *WorkerError\n%s", err, out)
	}
	if we.Rank != 1 || we.Status.Code != 3 || we.Status.Signal != 0 {
		t.Fatalf("WorkerError = %+v; want rank 1, exit code 3", we)
	}
	if !strings.Contains(err.Error(), "rank 1") || !strings.Contains(err.Error(), "exited with code 3") {
		t.Errorf("error %q should name rank 1 and code 3", err)
	}
	wantTail := make([]string, 0, 20)
	for i := 6; i <= 25; i++ {
		wantTail = append(wantTail, fmt.Sprintf("line %d", i))
	}
	if !slices.Equal(we.StderrTail, wantTail) {
		t.Errorf("StderrTail = %q; want the last 20 lines, %q…%q", we.StderrTail, wantTail[0], wantTail[19])
	}
	if r := we.Report(); !strings.Contains(r, "rank 1 failed") || !strings.Contains(r, "[rank 1] line 25") {
		t.Errorf("Report() = %q; want the failure and the stderr tail", r)
	}
	if took > 10*time.Second {
		t.Errorf("Run took %v; want under 10 s", took)
	}
	assertNoneAlive(t, out, 6) // 3 workers, 3 grandchildren
	// Run owns its goroutines: none survives it.
	deadline := time.Now().Add(2 * time.Second)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines after Run, %d before", runtime.NumGoroutine(), before)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestRunWorkerKilled(t *testing.T) {
	cfg := testConfig(2, "selfkill", "0")
	err, took := run(t, cfg)
	out := cfg.Stdout.(*launchtest.Output).String()
	var we *WorkerError
	if !errors.As(err, &we) || we.Rank != 0 || we.Status.Signal != syscall.SIGKILL {
		t.Fatalf("Run = %v; want a *WorkerError for rank 0 killed by SIGKILL\n%s", err, out)
	}
	if !strings.Contains(err.Error(), "killed by signal 9") {
		t.Errorf("error %q should name the signal", err)
	}
	if took > 10*time.Second {
		t.Errorf("Run took %v; want under 10 s", took)
	}
	assertNoneAlive(t, out, 4)
}

// TestRunGraceKill: workers that ignore SIGTERM are killed once the
// grace period is over.
func TestRunGraceKill(t *testing.T) {
	cfg := testConfig(2, "ignoreterm", "1")
	cfg.GracePeriod = 300 * time.Millisecond
	err, took := run(t, cfg)
	out := cfg.Stdout.(*launchtest.Output).String()
	var we *WorkerError
	if !errors.As(err, &we) || we.Rank != 1 {
		t.Fatalf("Run = %v; want rank 1's failure\n%s", err, out)
	}
	if took < cfg.GracePeriod || took > 10*time.Second {
		t.Errorf("Run took %v; want between the grace period (%v) and 10 s", took, cfg.GracePeriod)
	}
	assertNoneAlive(t, out, 4)
}

func TestRunSignalForwarded(t *testing.T) {
	cfg := testConfig(2, "signal")
	stdout := launchtest.Watch(`\] waiting\n`, 2)
	cfg.Stdout = stdout
	sigs := make(chan os.Signal, 1)
	cfg.Signals = sigs
	errc := make(chan error, 1)
	go func() {
		err, _ := run(t, cfg)
		errc <- err
	}()
	waitReady(t, stdout, errc)
	sigs <- syscall.SIGINT
	err := <-errc
	var se *SignalError
	if !errors.As(err, &se) || se.Signal != syscall.SIGINT {
		t.Fatalf("Run = %v; want a *SignalError for SIGINT", err)
	}
	out := stdout.String()
	for r := range 2 {
		if want := fmt.Sprintf("[rank %d] got interrupt", r); !strings.Contains(out, want) {
			t.Errorf("output lacks %q (signal not forwarded?):\n%s", want, out)
		}
	}
}

func TestRunContextCanceled(t *testing.T) {
	cfg := testConfig(2, "signal")
	stdout := launchtest.Watch(`\] waiting\n`, 2)
	cfg.Stdout = stdout
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- Run(ctx, cfg) }()
	<-stdout.Hit()
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("Run = %v; want context.Canceled", err)
	}
	if !strings.Contains(stdout.String(), "got terminated") {
		t.Errorf("workers were not sent SIGTERM:\n%s", stdout.String())
	}
}

func TestRunRestart(t *testing.T) {
	cfg := testConfig(2, "restart")
	cfg.Restart = MaxRestarts(2)
	out, _ := runOK(t, cfg) // a restart policy: success on the second attempt
	for _, want := range []string{"[rank 1] restart 0", "[rank 0] restart 1", "[rank 1] restart 1"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

// TestRunGoPackage builds testdata/worker through the package path.
func TestRunGoPackage(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a Go package")
	}
	cfg := testConfig(2, "env")
	cfg.Program = "./testdata/worker"
	err, _ := run(t, cfg)
	out := cfg.Stdout.(*launchtest.Output).String()
	if err != nil {
		t.Fatalf("Run: %v\n%s\n%s", err, out, cfg.Stderr.(*launchtest.Output).String())
	}
	if !strings.Contains(out, "[rank 1] RANK=1") || !strings.Contains(out, "[rank 0] RANK=0") {
		t.Fatalf("built workers did not run:\n%s", out)
	}
}

func TestRunBuildFailure(t *testing.T) {
	err, _ := runModule(t, "broken", "main.go", "package main\n\nfunc main() { undefinedThing() }\n")
	if err == nil || !strings.Contains(err.Error(), "go build . failed") || !strings.Contains(err.Error(), "undefinedThing") {
		t.Fatalf("Run = %v; want a build error quoting the compiler", err)
	}
}

// runModule runs a one-rank job of "." in a new Go module of that name
// holding one file, which the launcher builds; it skips under -short.
func runModule(t *testing.T, module, file, src string) (error, time.Duration) {
	t.Helper()
	if testing.Short() {
		t.Skip("runs the go tool")
	}
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module "+module+"\n\ngo 1.22\n"), 0o644)
	os.WriteFile(filepath.Join(dir, file), []byte(src), 0o644)
	cfg := testConfig(1)
	cfg.Program, cfg.Dir = ".", dir
	return run(t, cfg)
}

// TestRunMultiNode runs two launchers as two nodes of one job on this
// host: four workers pass a barrier through node 0's store.
func TestRunMultiNode(t *testing.T) {
	port := freePort(t)
	results := runNodes(t, port, "barrier-ok", func(node int) Config {
		cfg := testConfig(2, "streams")
		cfg.NNodes, cfg.NodeRank = 2, node
		cfg.MasterAddr, cfg.MasterPort = "127.0.0.1", port
		cfg.Token = "multi-node-secret"
		return cfg
	})
	for node, r := range results {
		if r.err != nil {
			t.Errorf("node %d: %v\n%s", node, r.err, r.out)
		}
	}
	for node, r := range results {
		for l := range 2 {
			rank := node*2 + l
			if want := fmt.Sprintf("[rank %d] info rank %d of 4 (local %d of 2, node %d of 2", rank, rank, l, node); !strings.Contains(r.out, want) {
				t.Errorf("node %d output lacks %q:\n%s", node, want, r.out)
			}
		}
	}
}

// TestRunMultiNodeFailure: a worker failing on node 1 stops node 0's
// workers too.
func TestRunMultiNodeFailure(t *testing.T) {
	port := freePort(t)
	results := runNodes(t, port, "failure", func(node int) Config {
		cfg := testConfig(2, "exit", "3", "3") // rank 3 lives on node 1
		cfg.NNodes, cfg.NodeRank = 2, node
		cfg.MasterAddr, cfg.MasterPort = "127.0.0.1", port
		cfg.Token = "multi-node-secret"
		return cfg
	})
	var we *WorkerError
	if !errors.As(results[1].err, &we) || we.Rank != 3 {
		t.Errorf("node 1: Run = %v; want rank 3's failure", results[1].err)
	}
	var re *RemoteError
	if !errors.As(results[0].err, &re) || !strings.Contains(re.Msg, "node 1: rank 3") {
		t.Errorf("node 0: Run = %v; want a *RemoteError naming node 1's rank 3", results[0].err)
	}
	for node, r := range results {
		if r.took > 10*time.Second {
			t.Errorf("node %d took %v; want under 10 s", node, r.took)
		}
		assertNoneAlive(t, r.out, 4)
	}
}

// TestRunMultiNodeStop: a worker on node 1 stops itself after a signal
// (exit 143); every other worker, on both nodes, stops after its step by
// itself and saves. Neither launcher sends them a signal, which would cut
// the save short: node 0 learns of the stop as a stop, not a failure.
func TestRunMultiNodeStop(t *testing.T) {
	port := freePort(t)
	results := runNodes(t, port, "stop", func(node int) Config {
		cfg := testConfig(2, "stop", "3") // rank 3 lives on node 1
		cfg.NNodes, cfg.NodeRank = 2, node
		cfg.MasterAddr, cfg.MasterPort = "127.0.0.1", port
		cfg.Token = "multi-node-secret"
		cfg.GracePeriod = 20 * time.Second // the saves take a second
		return cfg
	})
	var re *RemoteError
	if !errors.As(results[0].err, &re) || !strings.Contains(re.Msg, "node 1: rank 3") {
		t.Errorf("node 0: Run = %v; want a *RemoteError naming node 1's rank 3", results[0].err)
	}
	for node, r := range results {
		if strings.Contains(r.out, "before saving") {
			t.Errorf("node %d: a worker was signalled while saving:\n%s", node, r.out)
		}
		if want := 2 - node; strings.Count(r.out, "saved") != want {
			t.Errorf("node %d: %d workers saved, want %d:\n%s", node, strings.Count(r.out, "saved"), want, r.out)
		}
		if r.took > 15*time.Second {
			t.Errorf("node %d took %v; want under 15 s", node, r.took)
		}
	}
}

type nodeResult struct {
	err  error
	out  string
	took time.Duration
}

func runNodes(t *testing.T, port int, name string, config func(node int) Config) []nodeResult {
	t.Helper()
	results := make([]nodeResult, 2)
	var wg sync.WaitGroup
	for node := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cfg := config(node)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			start := time.Now()
			err := Run(ctx, cfg)
			results[node] = nodeResult{err, cfg.Stdout.(*launchtest.Output).String() + cfg.Stderr.(*launchtest.Output).String(), time.Since(start)}
		}()
	}
	wg.Wait()
	return results
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

func TestRunConfigErrors(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{"no-program", Config{NProcPerNode: 1}, "no program"},
		{"no-workers", Config{Program: "x"}, "--nproc-per-node 0"},
		{"node-rank-beyond", Config{Program: "x", NProcPerNode: 1, NNodes: 2, NodeRank: 2, MasterAddr: "h", MasterPort: 1, Token: "t"}, "--node-rank 2 with 2 nodes"},
		{"multi-node-no-master", Config{Program: "x", NProcPerNode: 1, NNodes: 2, Token: "t"}, "--master-addr is required"},
		{"multi-node-no-port", Config{Program: "x", NProcPerNode: 1, NNodes: 2, MasterAddr: "h", Token: "t"}, "--master-port is required"},
		{"multi-node-no-token", Config{Program: "x", NProcPerNode: 1, NNodes: 2, MasterAddr: "h", MasterPort: 1}, "COHORT_TOKEN"},
		{"multi-node-restart", Config{Program: "x", NProcPerNode: 1, NNodes: 2, MasterAddr: "h", MasterPort: 1, Token: "t", Restart: MaxRestarts(1)}, "single node"},
		{"bad-port", Config{Program: "x", NProcPerNode: 1, MasterPort: 70000}, "--master-port 70000"},
		{"missing-program", Config{Program: "./does-not-exist", NProcPerNode: 1}, "does-not-exist"},
		{"not-in-path", Config{Program: "no-such-command-xyz", NProcPerNode: 1}, "not in PATH"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := Run(context.Background(), tc.cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Run = %v; want an error containing %q", err, tc.want)
			}
		})
	}
}

// TestRunNodeRankTaken: of two launchers claiming node rank 1, one is
// told the rank is taken. The workers wait for a signal, so the job is
// still running when the second claim arrives; the test then cancels it.
func TestRunNodeRankTaken(t *testing.T) {
	port := freePort(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, 3)
	for _, node := range []int{0, 1, 1} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cfg := testConfig(1, "signal")
			cfg.NNodes, cfg.NodeRank = 2, node
			cfg.MasterAddr, cfg.MasterPort = "127.0.0.1", port
			cfg.Token = "t"
			cfg.ExitBarrierTimeout = 5 * time.Second
			errs <- Run(ctx, cfg)
		}()
	}
	first := <-errs
	cancel()
	wg.Wait()
	close(errs)
	if first == nil || !strings.Contains(first.Error(), "node rank 1 was already taken") {
		t.Fatalf("first error = %v; want the duplicate launcher told node rank 1 was taken", first)
	}
	for err := range errs {
		if !errors.Is(err, context.Canceled) {
			t.Errorf("the job's launchers returned %v; want context.Canceled", err)
		}
	}
}

func TestTail(t *testing.T) {
	tests := []struct {
		n, lines int
		want     []string
	}{
		{3, 0, nil},
		{3, 2, []string{"0", "1"}},
		{3, 3, []string{"0", "1", "2"}},
		{3, 7, []string{"4", "5", "6"}},
		{0, 5, nil},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("n=%d/lines=%d", tc.n, tc.lines), func(t *testing.T) {
			tl := newTail(tc.n)
			for i := range tc.lines {
				tl.add([]byte(strconv.Itoa(i)))
			}
			if got := tl.snapshot(); !slices.Equal(got, tc.want) {
				t.Fatalf("snapshot = %q; want %q", got, tc.want)
			}
		})
	}
}

func TestPumpLongAndUnterminatedLines(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("x", maxLineBytes+10)
	go func() {
		bw := bufio.NewWriter(w)
		bw.WriteString("a\r\n\n" + long + "\nlast")
		bw.Flush()
		w.Close()
	}()
	var out launchtest.Output
	pump(r, []sink{{w: &lineWriter{w: &out}, prefix: []byte("[rank 0] ")}}, nil)
	want := "[rank 0] a\n[rank 0] \n[rank 0] " + long[:maxLineBytes] + "\n[rank 0] " + long[maxLineBytes:] + "\n[rank 0] last\n"
	if got := out.String(); got != want {
		t.Fatalf("pump output (%d bytes) differs from the expected %d bytes", len(got), len(want))
	}
}

// TestRunSignalDuringJoin: a signal while the launcher waits for another
// node stops it promptly.
func TestRunSignalDuringJoin(t *testing.T) {
	cfg := testConfig(1, "streams")
	cfg.NNodes, cfg.NodeRank, cfg.MasterAddr, cfg.MasterPort, cfg.Token = 2, 0, "127.0.0.1", freePort(t), "t"
	sigs := make(chan os.Signal, 1)
	cfg.Signals = sigs
	sigs <- syscall.SIGTERM
	err, took := run(t, cfg)
	var se *SignalError
	if !errors.As(err, &se) || se.Signal != syscall.SIGTERM {
		t.Fatalf("Run = %v; want a *SignalError", err)
	}
	if took > 5*time.Second {
		t.Fatalf("Run took %v to honour the signal", took)
	}
}
