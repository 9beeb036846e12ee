package transporttest

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cohortml/cohort/distributed/transport"
)

// Real-process tests: the test binary re-executes itself once per rank
// (running only the package's TestHelperProcess, which calls
// HelperProcess) and the parent relays addresses between the children
// over their standard input and output:
//
//	child → parent  "addr <address>"     after listening
//	parent → child  "addrs <a0> <a1> …"  every rank's address
//	child → parent  "ready"              after connecting
//	child → parent  "ok" | "peer-error <rank> <text>" | "error <text>"
//
// After its report a child keeps its transport open until the parent
// closes its standard input, so that no survivor's goodbye can be taken
// for the failure under test.
// The environment variables below select the child's role; they are read
// only here.
const (
	envChild    = "COHORT_TRANSPORTTEST_CHILD"
	envRank     = "COHORT_TRANSPORTTEST_RANK"
	envWorld    = "COHORT_TRANSPORTTEST_WORLD"
	envScenario = "COHORT_TRANSPORTTEST_SCENARIO"
	envSize     = "COHORT_TRANSPORTTEST_SIZE"
	envIters    = "COHORT_TRANSPORTTEST_ITERS"
)

// Scenarios a child can run.
const (
	// ScenarioExchange: every rank sends messages of several sizes (up to
	// 16 MiB + 3) to every other and checks what it receives.
	ScenarioExchange = "exchange"
	// ScenarioTransfer: ranks stream large messages around in a loop until
	// a peer fails; the parent kills the last rank with SIGKILL meanwhile.
	// Survivors report the rank their error names.
	ScenarioTransfer = "transfer"
	// ScenarioPingPong: rank 0 sends a message to rank 1, which echoes it;
	// rank 0 reports the median and mean round trip in ns.
	ScenarioPingPong = "pingpong"
	// ScenarioExchangeAll: every rank sends a message to every other rank
	// and receives one from each, sends running concurrently with the
	// receives as a collective's executor runs them (at world 2, one step
	// of an all-reduce); rank 0 reports the median and mean per round in
	// ns, each round's time being its slowest rank's.
	ScenarioExchangeAll = "exchange-all"
	// ScenarioStream: rank 0 streams messages to rank 1, which acknowledges
	// the last; rank 0 reports the total time and bytes per second.
	ScenarioStream = "stream"
)

// ProcSetup builds a child's transport. It publishes its own address
// through exchange, which returns every rank's address.
type ProcSetup func(ctx context.Context, rank, worldSize int, exchange func(addr string) ([]string, error)) (transport.Transport, error)

// HelperProcess is the body of a package's TestHelperProcess: in a child
// started by RunProcesses it runs the child's scenario and exits the
// process; otherwise it returns at once.
func HelperProcess(setup ProcSetup) {
	if os.Getenv(envChild) != "1" {
		return
	}
	rank, err1 := strconv.Atoi(os.Getenv(envRank))
	world, err2 := strconv.Atoi(os.Getenv(envWorld))
	if err := errors.Join(err1, err2); err != nil {
		fmt.Printf("error bad child environment: %v\n", err)
		os.Exit(2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 64<<10), 1<<20)
	exchange := func(addr string) ([]string, error) {
		fmt.Printf("addr %s\n", addr)
		if !in.Scan() {
			return nil, fmt.Errorf("no addresses from the parent: %v", in.Err())
		}
		f := strings.Fields(in.Text())
		if len(f) != world+1 || f[0] != "addrs" {
			return nil, fmt.Errorf("bad address line %q", in.Text())
		}
		return f[1:], nil
	}
	tr, err := setup(ctx, rank, world, exchange)
	if err != nil {
		fmt.Printf("error setup: %v\n", oneLine(err))
		os.Exit(1)
	}
	fmt.Println("ready")
	switch os.Getenv(envScenario) {
	case ScenarioExchange:
		err = childExchange(ctx, tr)
	case ScenarioTransfer:
		err = childTransfer(ctx, tr)
	case ScenarioPingPong, ScenarioExchangeAll, ScenarioStream:
		var report string
		report, err = childBench(ctx, tr, os.Getenv(envScenario))
		if err == nil {
			fmt.Printf("ok %s\n", report)
			for in.Scan() {
			}
			tr.Close()
			os.Exit(0)
		}
	default:
		err = fmt.Errorf("unknown scenario %q", os.Getenv(envScenario))
	}
	var pe *transport.PeerError
	switch {
	case err == nil:
		fmt.Println("ok")
	case errors.As(err, &pe):
		fmt.Printf("peer-error %d %s\n", pe.Peer, oneLine(err))
	default:
		fmt.Printf("error %s\n", oneLine(err))
	}
	for in.Scan() {
	}
	tr.Close()
	os.Exit(0)
}

func oneLine(err error) string { return strings.ReplaceAll(err.Error(), "\n", " | ") }

func childExchange(ctx context.Context, tr transport.Transport) error {
	if err := exchangeAll(ctx, tr, []int{0, 1, 4096, 1<<20 + 1, 16<<20 + 3}); err != nil {
		return err
	}
	n := tr.Size()
	// A last round so no rank closes while others still receive.
	for to := range n {
		if err := tr.Send(ctx, to, transport.Tag{Group: 2}, nil); err != nil {
			return err
		}
	}
	for from := range n {
		if err := tr.Recv(ctx, from, transport.Tag{Group: 2}, nil); err != nil {
			return err
		}
	}
	return nil
}

// childTransfer exchanges 2 MiB with every other rank each round, all
// sends and receives at once, until one fails; it returns the first
// failure.
func childTransfer(ctx context.Context, tr transport.Transport) error {
	const size = 2 << 20
	r, n := tr.Rank(), tr.Size()
	out := Pattern(size, uint64(r))
	in := make([][]byte, n)
	for p := range in {
		in[p] = make([]byte, size)
	}
	errs := make(chan error, 2*n)
	for round := uint64(0); ; round++ {
		tag := transport.Tag{Group: 3, Seq: round}
		var wg sync.WaitGroup
		for p := range n {
			if p == r {
				continue
			}
			wg.Go(func() {
				if err := tr.Send(ctx, p, tag, out); err != nil {
					errs <- err
				}
			})
			wg.Go(func() {
				if err := tr.Recv(ctx, p, tag, in[p]); err != nil {
					errs <- err
				}
			})
		}
		finished := make(chan struct{})
		go func() { wg.Wait(); close(finished) }()
		select {
		case err := <-errs:
			return err
		case <-finished:
			select {
			case err := <-errs:
				return err
			default:
			}
		}
	}
}

// childBench runs a timing scenario; sizes and counts come from the
// environment.
func childBench(ctx context.Context, tr transport.Transport, scenario string) (string, error) {
	size, err1 := strconv.Atoi(os.Getenv(envSize))
	iters, err2 := strconv.Atoi(os.Getenv(envIters))
	if err := errors.Join(err1, err2); err != nil {
		return "", err
	}
	r := tr.Rank()
	if scenario == ScenarioExchangeAll {
		return benchExchangeAll(ctx, tr, size, iters)
	}
	if r > 1 {
		return "", nil
	}
	peer := 1 - r
	tag := transport.Tag{Group: 50}
	out, in := Pattern(size, uint64(r)), make([]byte, size)
	warm := max(iters/10, 5)
	times := make([]time.Duration, 0, iters)
	switch scenario {
	case ScenarioPingPong:
		for i := range warm + iters {
			start := time.Now()
			if r == 0 {
				if err := tr.Send(ctx, peer, tag, out); err != nil {
					return "", err
				}
				if err := tr.Recv(ctx, peer, tag, in); err != nil {
					return "", err
				}
			} else {
				if err := tr.Recv(ctx, peer, tag, in); err != nil {
					return "", err
				}
				if err := tr.Send(ctx, peer, tag, in); err != nil {
					return "", err
				}
			}
			if i >= warm {
				times = append(times, time.Since(start))
			}
		}
	case ScenarioStream:
		ack := transport.Tag{Group: 51}
		// stream sends k messages from rank 0, received by rank 1.
		stream := func(k int) error {
			for range k {
				if r == 0 {
					if err := tr.Send(ctx, peer, tag, out); err != nil {
						return err
					}
				} else if err := tr.Recv(ctx, peer, tag, in); err != nil {
					return err
				}
			}
			return nil
		}
		if err := stream(warm); err != nil {
			return "", err
		}
		start := time.Now()
		if err := stream(iters); err != nil {
			return "", err
		}
		if r == 1 {
			return "", tr.Send(ctx, peer, ack, nil)
		}
		if err := tr.Recv(ctx, peer, ack, nil); err != nil {
			return "", err
		}
		d := time.Since(start)
		return fmt.Sprintf("%d %.0f", d.Nanoseconds(), float64(size)*float64(iters)/d.Seconds()), nil
	}
	return medianMean(times), nil
}

func medianMean(times []time.Duration) string {
	slices.Sort(times)
	var sum time.Duration
	for _, d := range times {
		sum += d
	}
	return fmt.Sprintf("%d %d", times[len(times)/2].Nanoseconds(), (sum / time.Duration(len(times))).Nanoseconds())
}

// inlineSendBytes: messages up to this size are sent from the round's own
// goroutine (every transport buffers them without waiting for the
// receiver); longer ones from one goroutine per peer, concurrently with
// the receives.
const inlineSendBytes = 64 << 10

// benchExchangeAll times rounds of all-pairs exchange. Each rank's
// per-round times are gathered to rank 0, which reports the median over
// rounds of the slowest rank's time.
func benchExchangeAll(ctx context.Context, tr transport.Transport, size, iters int) (string, error) {
	r, n := tr.Rank(), tr.Size()
	out := Pattern(size, uint64(r))
	in := make([][]byte, n)
	for p := range in {
		in[p] = make([]byte, size)
	}
	warm := max(iters/10, 5)
	times := make([]time.Duration, warm+iters)
	errs := make(chan error, n)
	for i := range warm + iters {
		tag := transport.Tag{Group: 52, Seq: uint64(i)}
		start := time.Now()
		pending := 0
		for p := range n {
			if p == r {
				continue
			}
			if size <= inlineSendBytes {
				if err := tr.Send(ctx, p, tag, out); err != nil {
					return "", err
				}
				continue
			}
			pending++
			go func() { errs <- tr.Send(ctx, p, tag, out) }()
		}
		for p := range n {
			if p != r {
				if err := tr.Recv(ctx, p, tag, in[p]); err != nil {
					return "", err
				}
			}
		}
		for range pending {
			if err := <-errs; err != nil {
				return "", err
			}
		}
		times[i] = time.Since(start)
	}
	times = times[warm:]
	// Gather to rank 0 and take the maximum over ranks per round.
	raw := make([]byte, 8*len(times))
	for i, d := range times {
		binary.LittleEndian.PutUint64(raw[8*i:], uint64(d))
	}
	tag := transport.Tag{Group: 53}
	if r != 0 {
		return "", tr.Send(ctx, 0, tag, raw)
	}
	own := medianMean(slices.Clone(times))
	for p := 1; p < n; p++ {
		if err := tr.Recv(ctx, p, tag, raw); err != nil {
			return "", err
		}
		for i := range times {
			times[i] = max(times[i], time.Duration(binary.LittleEndian.Uint64(raw[8*i:])))
		}
	}
	return medianMean(times) + " own " + own, nil
}

// ProcessBench runs a timing scenario between world child processes (only
// ScenarioExchangeAll uses more than two) and returns rank 0's two
// reported numbers: for ScenarioPingPong and ScenarioExchangeAll the
// median and mean time per iteration in ns, for ScenarioStream the total
// ns and bytes per second.
func ProcessBench(b *testing.B, helperTest, scenario string, world, size, iters int) (float64, float64) {
	b.Helper()
	res := runProcesses(b, helperTest, world, scenario, false, 5*time.Minute,
		envSize+"="+strconv.Itoa(size), envIters+"="+strconv.Itoa(iters))
	var x, y float64
	if _, err := fmt.Sscanf(res[0].Line, "ok %g %g", &x, &y); err != nil {
		b.Fatalf("rank 0 reported %q", res[0].Line)
	}
	b.Logf("rank 0: %s", res[0].Line)
	for r := 1; r < world; r++ {
		if !strings.HasPrefix(res[r].Line, "ok") {
			b.Fatalf("rank %d reported %q", r, res[r].Line)
		}
	}
	return x, y
}

// child is the parent's handle on one child process.
type child struct {
	rank  int
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string // stdout lines; closed at EOF
}

func (c *child) next(t testing.TB, d time.Duration) (string, bool) {
	t.Helper()
	select {
	case l, ok := <-c.lines:
		return l, ok
	case <-time.After(d):
		return "", false
	}
}

// ProcResult is what one child reported at the end.
type ProcResult struct {
	Line string        // "ok", "peer-error <rank> …" or "error …"
	At   time.Duration // when the line arrived, from the kill (or from "ready")
}

// RunProcesses starts world children of the test binary running scenario,
// relays their addresses, waits for all to be connected, kills the last
// rank with SIGKILL if kill is set (after letting traffic flow briefly),
// and returns each surviving child's final report. A child that does not
// report within limit fails the test. helperTest names the package's
// helper test function (normally "TestHelperProcess").
func RunProcesses(t *testing.T, helperTest string, world int, scenario string, kill bool, limit time.Duration) []ProcResult {
	t.Helper()
	if testing.Short() {
		t.Skip("starts processes")
	}
	return runProcesses(t, helperTest, world, scenario, kill, limit)
}

func runProcesses(t testing.TB, helperTest string, world int, scenario string, kill bool, limit time.Duration, env ...string) []ProcResult {
	t.Helper()
	children := make([]*child, world)
	var wg sync.WaitGroup
	t.Cleanup(func() {
		for _, c := range children {
			if c != nil {
				c.stdin.Close()
			}
		}
		for _, c := range children {
			if c != nil && c.cmd.Process != nil {
				c.cmd.Process.Kill()
			}
		}
		wg.Wait()
		for _, c := range children {
			if c != nil {
				c.cmd.Wait()
			}
		}
	})
	for r := range world {
		cmd := exec.Command(os.Args[0], "-test.run=^"+helperTest+"$", "-test.count=1")
		cmd.Env = append(os.Environ(), envChild+"=1", envRank+"="+strconv.Itoa(r),
			envWorld+"="+strconv.Itoa(world), envScenario+"="+scenario)
		cmd.Env = append(cmd.Env, env...)
		cmd.Stderr = os.Stderr
		stdin, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		c := &child{rank: r, cmd: cmd, stdin: stdin, lines: make(chan string, 16)}
		children[r] = c
		wg.Go(func() {
			defer close(c.lines)
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				c.lines <- sc.Text()
			}
		})
	}
	const setupLimit = 60 * time.Second
	addrs := make([]string, world)
	for r, c := range children {
		l, ok := c.next(t, setupLimit)
		if !ok || !strings.HasPrefix(l, "addr ") {
			t.Fatalf("rank %d: expected its address, got %q", r, l)
		}
		addrs[r] = strings.TrimPrefix(l, "addr ")
	}
	line := "addrs " + strings.Join(addrs, " ") + "\n"
	for _, c := range children {
		if _, err := io.WriteString(c.stdin, line); err != nil {
			t.Fatal(err)
		}
	}
	for r, c := range children {
		if l, ok := c.next(t, setupLimit); !ok || l != "ready" {
			t.Fatalf("rank %d: expected ready, got %q", r, l)
		}
	}
	start := time.Now()
	survivors := children
	if kill {
		time.Sleep(200 * time.Millisecond) // let the transfers get going
		victim := children[world-1]
		if err := victim.cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		start = time.Now()
		survivors = children[:world-1]
	}
	results := make([]ProcResult, len(survivors))
	for r, c := range survivors {
		l, ok := c.next(t, limit-time.Since(start))
		if !ok {
			t.Fatalf("rank %d: no report within %v of the %s", r, limit, map[bool]string{true: "kill", false: "start"}[kill])
		}
		results[r] = ProcResult{Line: l, At: time.Since(start)}
	}
	return results
}

// ProcessTests are the real-process tests of a transport: its package's
// TestProcessesExchange and TestProcessesKill9 call Exchange and Kill9,
// with a TestHelperProcess that calls HelperProcess.
type ProcessTests struct {
	// Worlds lists the world sizes of Exchange, a subtest each
	// ("world=3"); nil means {2, 3}.
	Worlds []int
	// KillWorlds lists those of Kill9; nil means {2, 3}.
	KillWorlds []int
	// Via, if not nil, names the part ("tcp", "shm") through which rank
	// reaches victim: the survivor's error must come from it.
	Via func(rank, victim int) string
	// AfterKill, if not nil, runs at the end of each Kill9 subtest (a
	// check that nothing is left behind).
	AfterKill func(t *testing.T)
}

func worldsOr(worlds []int) []int {
	if worlds == nil {
		return []int{2, 3}
	}
	return worlds
}

// Exchange runs ScenarioExchange between real processes: every rank must
// report ok within 60 s.
func (p ProcessTests) Exchange(t *testing.T) {
	for _, world := range worldsOr(p.Worlds) {
		t.Run(fmt.Sprintf("world=%d", world), func(t *testing.T) {
			for r, res := range RunProcesses(t, "TestHelperProcess", world, ScenarioExchange, false, 60*time.Second) {
				if res.Line != "ok" {
					t.Errorf("rank %d: %s", r, res.Line)
				}
			}
		})
	}
}

// Kill9 runs ScenarioTransfer between real processes and kills the last
// rank with SIGKILL in the middle of large transfers: every survivor must
// report an error naming it (from the part Via names) within 5 s.
func (p ProcessTests) Kill9(t *testing.T) {
	for _, world := range worldsOr(p.KillWorlds) {
		t.Run(fmt.Sprintf("world=%d", world), func(t *testing.T) {
			victim := world - 1
			for r, res := range RunProcesses(t, "TestHelperProcess", world, ScenarioTransfer, true, 5*time.Second) {
				want, via := fmt.Sprintf("peer-error %d ", victim), ""
				if p.Via != nil {
					via = p.Via(r, victim)
				}
				if !strings.HasPrefix(res.Line, want) || via != "" && !strings.Contains(res.Line, via+": ") {
					t.Errorf("rank %d reported %q, want a %s error naming rank %d", r, res.Line, via, victim)
					continue
				}
				if via != "" {
					via = " (" + via + ")"
				}
				t.Logf("rank %d%s after %v: %s", r, via, res.At.Round(time.Millisecond), res.Line)
			}
			if p.AfterKill != nil {
				p.AfterKill(t)
			}
		})
	}
}
