package native_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cohortml/cohort/distributed"
	"github.com/cohortml/cohort/distributed/distributedtest"
	"github.com/cohortml/cohort/distributed/grouptest"
	"github.com/cohortml/cohort/distributed/rendezvous"
)

// Real-process tests re-execute this test binary once per rank with
// torchrun's environment plus COHORT_DIST_TEST_CHILD naming the scenario;
// TestMain then runs the scenario instead of the tests. Children print
// "ready" once their group is up and "ok" when the scenario passed, and
// report failures on stderr with exit status 1.

const childEnv = "COHORT_DIST_TEST_CHILD"

func TestMain(m *testing.M) {
	if scenario := os.Getenv(childEnv); scenario != "" {
		os.Exit(runChild(scenario))
	}
	os.Exit(m.Run())
}

func runChild(scenario string) int {
	info, err := rendezvous.FromEnv(os.Getenv)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	wd, err := distributed.WatchdogFromEnv(os.Getenv)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	wd.Log = slog.New(slog.NewTextHandler(os.Stdout, nil)) // the parent reads diagnoses from stdout
	pg, err := distributed.InitFromInfo(ctx, info, distributed.Options{
		Transport: os.Getenv("COHORT_DIST_TEST_TRANSPORT"),
		Group:     distributed.GroupOptions{Timeout: 30 * time.Second},
		Watchdog:  wd,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer pg.Close()
	fmt.Println("ready")
	if err := childScenarios[scenario](ctx, pg); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println("ok")
	return 0
}

var childScenarios = map[string]func(ctx context.Context, pg distributed.ProcessGroup) error{
	"collectives": childCollectives,
	"loop":        childLoop,
	"desync":      childDesync,
}

// childCollectives runs a subset of the grid: every kind on float32 and
// int64, counts 0, 1, 1000 and 2^20+3 for the bandwidth paths.
func childCollectives(ctx context.Context, pg distributed.ProcessGroup) error {
	r, world := pg.Rank(), pg.Size()
	check := func(what string, b distributed.Buffer, want func(int) float64) error {
		for i := range b.Len() {
			if g, w := grouptest.At(b, i), want(i); g != w {
				return fmt.Errorf("rank %d %s: element %d = %v, want %v", r, what, i, g, w)
			}
		}
		return nil
	}
	for _, n := range []int{0, 1, 1000, 1<<20 + 3} {
		for _, dt := range []distributed.DType{distributed.Float32, distributed.Int64} {
			if n > 1000 && dt != distributed.Float32 {
				continue
			}
			ops := reduceOps
			if n > 1000 {
				ops = []distributed.ReduceOp{distributed.Sum}
			}
			for _, op := range ops {
				what := fmt.Sprintf("allreduce n=%d %s %s", n, dtName(dt), opName(op))
				buf := grouptest.Buffer(dt, n, func(i int) float64 { return value(r, i) })
				if err := pg.AllReduce(ctx, buf, op).Wait(); err != nil {
					return err
				}
				if err := check(what, buf, func(i int) float64 { return reduced(dt, op, world, i) }); err != nil {
					return err
				}
			}
			buf := grouptest.Buffer(dt, n, func(i int) float64 { return value(r, i) })
			if err := pg.Broadcast(ctx, buf, world-1).Wait(); err != nil {
				return err
			}
			if err := check("broadcast", buf, func(i int) float64 { return value(world-1, i) }); err != nil {
				return err
			}
			in := grouptest.Buffer(dt, n, func(i int) float64 { return value(r, i) })
			out := grouptest.Buffer(dt, n*world, func(int) float64 { return 99 })
			if err := pg.AllGather(ctx, out, in).Wait(); err != nil {
				return err
			}
			if err := check("allgather", out, func(i int) float64 { return value(i/n, i%n) }); err != nil {
				return err
			}
			out = grouptest.Buffer(dt, n, func(int) float64 { return 99 })
			in = grouptest.Buffer(dt, n*world, func(i int) float64 { return value(r, i) })
			if err := pg.ReduceScatter(ctx, out, in, distributed.Sum).Wait(); err != nil {
				return err
			}
			if err := check("reducescatter", out, func(i int) float64 { return reduced(dt, distributed.Sum, world, r*n+i) }); err != nil {
				return err
			}
		}
	}
	return pg.Barrier(ctx).Wait()
}

// childLoop all-reduces 1 MiB until the group fails, then reports the
// error (the kill test expects one).
func childLoop(ctx context.Context, pg distributed.ProcessGroup) error {
	buf := distributed.F32(make([]float32, 1<<18))
	for k := 0; ; k++ {
		if k == 10 {
			fmt.Println("looping")
		}
		if err := pg.AllReduce(context.Background(), buf, distributed.Sum).Wait(); err != nil {
			return err
		}
	}
}

// childDesync: rank 1 broadcasts while the others all-reduce.
func childDesync(ctx context.Context, pg distributed.ProcessGroup) error {
	buf := distributed.F32(make([]float32, 100))
	var err error
	if pg.Rank() == 1 {
		err = pg.Broadcast(ctx, buf, 0).Wait()
	} else {
		err = pg.AllReduce(ctx, buf, distributed.Sum).Wait()
	}
	if err == nil {
		err = pg.Barrier(ctx).Wait()
	}
	if err == nil {
		return nil
	}
	return err
}

// child is one spawned rank.
type child struct {
	cmd    *exec.Cmd
	stdout *bufio.Scanner
	stderr bytes.Buffer
	lines  chan string
	exited chan struct{}
	err    error
}

// spawn starts world children running scenario over transport, with
// extra added to each one's environment.
func spawn(t *testing.T, world int, transport, scenario string, extra ...string) []*child {
	t.Helper()
	port := distributedtest.FreePort(t)
	children := make([]*child, world)
	for r := range world {
		children[r] = startChild(t, append(rankEnv(scenario, transport, r, world, port, "test-token"), extra...)...)
	}
	return children
}

// rankEnv is torchrun's environment for rank r of a local job on port.
func rankEnv(scenario, transport string, r, world, port int, token string) []string {
	env := []string{childEnv + "=" + scenario,
		"COHORT_DIST_TEST_TRANSPORT=" + transport,
		"RANK=" + strconv.Itoa(r), "WORLD_SIZE=" + strconv.Itoa(world),
		"LOCAL_RANK=" + strconv.Itoa(r), "LOCAL_WORLD_SIZE=" + strconv.Itoa(world),
		"MASTER_ADDR=127.0.0.1", "MASTER_PORT=" + strconv.Itoa(port),
	}
	if token != "" {
		env = append(env, "COHORT_TOKEN="+token)
	}
	return env
}

// startChild re-executes the test binary with env added; the child is
// killed and reaped when the test ends.
func startChild(t *testing.T, env ...string) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), env...)
	c := &child{cmd: cmd, lines: make(chan string, 16), exited: make(chan struct{})}
	cmd.Stderr = &c.stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { // owned by the child: ends when its stdout closes
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			c.lines <- sc.Text()
		}
		io.Copy(io.Discard, out)
		close(c.lines)
		c.err = cmd.Wait()
		close(c.exited)
	}()
	t.Cleanup(func() {
		c.cmd.Process.Kill()
		<-c.exited
	})
	return c
}

// TestRealProcessesTwoJobs: two hand-started jobs of 2 ranks each, no
// token, on the same MASTER_PORT; job A's rank 1 starts late. Job B's
// rank 0 cannot serve the store; B's rank 1 joins A's rank 0. When A's
// rank 1 arrives, every process fails, naming rank 1 as claimed twice:
// no process exits 0 having trained with another job's ranks, and none
// hangs.
func TestRealProcessesTwoJobs(t *testing.T) {
	if testing.Short() {
		t.Skip("real-process tests skipped in -short mode")
	}
	port := distributedtest.FreePort(t)
	a0 := startChild(t, rankEnv("loop", "tcp", 0, 2, port, "")...)
	time.Sleep(300 * time.Millisecond) // A's rank 0 serves the store first
	b0 := startChild(t, rankEnv("loop", "tcp", 0, 2, port, "")...)
	b1 := startChild(t, rankEnv("loop", "tcp", 1, 2, port, "")...)
	if !b1.await("looping", 30*time.Second) {
		t.Fatalf("job B's rank 1 never trained with job A's rank 0: %s", b1.stderr.String())
	}
	arrived := time.Now()
	a1 := startChild(t, rankEnv("loop", "tcp", 1, 2, port, "")...)
	for _, c := range []struct {
		name string
		c    *child
		want string
	}{{"A rank 0", a0, "rank 1 was claimed twice"}, {"B rank 0", b0, "cannot serve the store"},
		{"B rank 1", b1, "rank 1 was claimed twice"}, {"A rank 1", a1, "rank 1 was claimed twice"}} {
		if !c.c.wait(20*time.Second - time.Since(arrived)) {
			t.Errorf("%s still running 20 s after the duplicate arrived", c.name)
			continue
		}
		msg := c.c.stderr.String()
		if c.c.err == nil || !strings.Contains(msg, c.want) {
			t.Errorf("%s: exit %v, want a failure saying %q; stderr:\n%s", c.name, c.c.err, c.want, msg)
		}
	}
	t.Logf("every process failed within %v of the duplicate's arrival; job A rank 0 said: %s", time.Since(arrived).Round(time.Millisecond), strings.TrimSpace(a0.stderr.String()))
}

// await waits for a child to print line (or exit).
func (c *child) await(line string, d time.Duration) bool {
	timeout := time.After(d)
	for {
		select {
		case l, ok := <-c.lines:
			if !ok {
				return false
			}
			if l == line {
				return true
			}
		case <-timeout:
			return false
		}
	}
}

func (c *child) wait(d time.Duration) (exited bool) {
	select {
	case <-c.exited:
		return true
	case <-time.After(d):
		return false
	}
}

func TestRealProcessesCollectives(t *testing.T) {
	if testing.Short() {
		t.Skip("real-process tests skipped in -short mode")
	}
	for _, tc := range []struct {
		transport string
		world     int
	}{{"tcp", 2}, {"tcp", 3}, {"shm", 2}, {"shm", 3}} {
		t.Run(fmt.Sprintf("%s/world=%d", tc.transport, tc.world), func(t *testing.T) {
			children := spawn(t, tc.world, tc.transport, "collectives")
			for r, c := range children {
				if !c.wait(90 * time.Second) {
					t.Fatalf("rank %d still running after 90 s", r)
				}
				if c.err != nil {
					t.Errorf("rank %d: %v\n%s", r, c.err, c.stderr.String())
				}
			}
		})
	}
}

// TestRealProcessesKill: kill -9 one rank mid all-reduce; every survivor
// exits within 5 s with an error naming it.
func TestRealProcessesKill(t *testing.T) {
	if testing.Short() {
		t.Skip("real-process tests skipped in -short mode")
	}
	for _, transport := range []string{"tcp", "shm"} {
		t.Run(transport, func(t *testing.T) { testKill(t, transport) })
	}
}

func testKill(t *testing.T, transport string) {
	const world, victim = 3, 1
	children := spawn(t, world, transport, "loop")
	for r, c := range children {
		if !c.await("looping", 60*time.Second) {
			t.Fatalf("rank %d never reached the loop: %s", r, c.stderr.String())
		}
	}
	killed := time.Now()
	if err := children[victim].cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for r, c := range children {
		if r == victim {
			continue
		}
		wg.Go(func() {
			if !c.wait(5*time.Second - time.Since(killed)) {
				t.Errorf("rank %d still running 5 s after the kill", r)
				return
			}
			msg := c.stderr.String()
			t.Logf("rank %d exited after %v: %s", r, time.Since(killed).Round(time.Millisecond), strings.TrimSpace(msg))
			if c.err == nil || !strings.Contains(msg, fmt.Sprintf("peer %d", victim)) || !strings.Contains(msg, "process group aborted") && !strings.Contains(msg, "allreduce") {
				t.Errorf("rank %d: exit %v, stderr does not name rank %d: %s", r, c.err, victim, msg)
			}
		})
	}
	wg.Wait()
}

// TestRealProcessesDesync: mismatched collectives across processes fail on
// every rank, and every rank's error names both calls and the odd rank
// (directly, or through the detector's abort notice).
func TestRealProcessesDesync(t *testing.T) {
	if testing.Short() {
		t.Skip("real-process tests skipped in -short mode")
	}
	children := spawn(t, 3, "tcp", "desync")
	for r, c := range children {
		if !c.wait(30 * time.Second) {
			t.Fatalf("rank %d still running after 30 s", r)
		}
		msg := c.stderr.String()
		if c.err == nil {
			t.Errorf("rank %d succeeded", r)
		}
		for _, s := range []string{"broadcast(float32×100, root 0)", "allreduce(float32×100, sum)", "rank 1", "seq 1"} {
			if !strings.Contains(msg, s) {
				t.Errorf("rank %d: error lacks %q", r, s)
			}
		}
		t.Logf("rank %d: %s", r, strings.TrimSpace(msg))
	}
}
