package shm

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cohortml/cohort/distributed/transport"
	"github.com/cohortml/cohort/distributed/transport/transporttest"
)

const testPrefix = "cohort-test"

func connectWorld(tb testing.TB, n int, opts func(rank int) Options) ([]*Transport, []error) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ls := make([]*Listener, n)
	addrs := make([]string, n)
	for r := range n {
		l, err := Listen(ctx, r, n, opts(r))
		if err != nil {
			tb.Fatal(err)
		}
		ls[r] = l
		addrs[r] = l.Addr()
	}
	ts := make([]*Transport, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Go(func() { ts[r], errs[r] = ls[r].Connect(ctx, addrs) })
	}
	wg.Wait()
	return ts, errs
}

func newWorld(tb testing.TB, n int) transporttest.World { return worldWith(nil, nil)(tb, n) }

// worldWith returns a world maker for the suite whose ranks' options are
// the tests' defaults changed by tweak (if not nil), and which fails the
// test unless check (if not nil) accepts every rank's transport.
func worldWith(tweak func(*Options), check func(rank int, t *Transport) error) func(testing.TB, int) transporttest.World {
	return func(tb testing.TB, n int) transporttest.World {
		ts, errs := connectWorld(tb, n, func(int) Options {
			o := Options{Token: []byte("test-token"), Prefix: testPrefix, RingBytes: 1 << 20}
			if tweak != nil {
				tweak(&o)
			}
			return o
		})
		for r, err := range errs {
			if err != nil {
				tb.Fatalf("rank %d: %v", r, err)
			}
		}
		w := transporttest.World{Kill: func(r int) { ts[r].kill() }}
		for r, t := range ts {
			if check != nil {
				if err := check(r, t); err != nil {
					tb.Fatalf("rank %d: %v", r, err)
				}
			}
			w.Transports = append(w.Transports, t)
		}
		return w
	}
}

// leftovers lists this package's test files in /dev/shm.
func leftovers(t *testing.T) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join("/dev/shm", testPrefix+"-*"))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestConformance(t *testing.T) {
	transporttest.Run(t, newWorld, transporttest.Config{})
	if files := leftovers(t); len(files) > 0 {
		t.Errorf("files left in /dev/shm: %v", files)
	}
}

func procSetup(ctx context.Context, rank, world int, exchange func(string) ([]string, error)) (transport.Transport, error) {
	opts := Options{Token: []byte("process-token"), Prefix: testPrefix}
	// Ring size for benchmark experiments.
	if v, err := strconv.ParseInt(os.Getenv("COHORT_SHM_TEST_RING_BYTES"), 10, 64); err == nil {
		opts.RingBytes = v
	}
	if v, err := time.ParseDuration(os.Getenv("COHORT_SHM_TEST_SPIN")); err == nil {
		opts.Spin = v
	}
	l, err := Listen(ctx, rank, world, opts)
	if err != nil {
		return nil, err
	}
	addrs, err := exchange(l.Addr())
	if err != nil {
		l.Close()
		return nil, err
	}
	return l.Connect(ctx, addrs)
}

// TestHelperProcess is the body of the child processes of the tests below.
func TestHelperProcess(t *testing.T) { transporttest.HelperProcess(procSetup) }

func TestProcessesExchange(t *testing.T) {
	for _, world := range []int{2, 3} {
		t.Run(fmt.Sprintf("world=%d", world), func(t *testing.T) {
			for r, res := range transporttest.RunProcesses(t, "TestHelperProcess", world, transporttest.ScenarioExchange, false, 60*time.Second) {
				if res.Line != "ok" {
					t.Errorf("rank %d: %s", r, res.Line)
				}
			}
		})
	}
}

// TestProcessesKill9: SIGKILL one rank in the middle of large transfers;
// every survivor must get an error naming it within 5 s, and no file is
// left behind.
func TestProcessesKill9(t *testing.T) {
	for _, world := range []int{2, 3} {
		t.Run(fmt.Sprintf("world=%d", world), func(t *testing.T) {
			victim := world - 1
			for r, res := range transporttest.RunProcesses(t, "TestHelperProcess", world, transporttest.ScenarioTransfer, true, 5*time.Second) {
				want := fmt.Sprintf("peer-error %d ", victim)
				if !strings.HasPrefix(res.Line, want) {
					t.Errorf("rank %d reported %q, want an error naming rank %d", r, res.Line, victim)
					continue
				}
				t.Logf("rank %d after %v: %s", r, res.At.Round(time.Millisecond), res.Line)
			}
			if files := leftovers(t); len(files) > 0 {
				t.Errorf("files left in /dev/shm: %v", files)
			}
		})
	}
}

func BenchmarkPingPong4KiB(b *testing.B) {
	transporttest.PingPong(b, newWorld(b, 2), 4<<10)
}

func BenchmarkExchange4KiB(b *testing.B) {
	transporttest.Exchange(b, newWorld(b, 2), 4<<10)
}

func BenchmarkThroughput16MiB(b *testing.B) {
	transporttest.Throughput(b, newWorld(b, 2), 16<<20)
}

func BenchmarkExchange16MiB(b *testing.B) {
	transporttest.Exchange(b, newWorld(b, 2), 16<<20)
}

// BenchmarkProcesses measures between two real processes; run with
// -benchtime=1x.
func BenchmarkProcesses(b *testing.B) { transporttest.ProcessBenchmarks(b, "TestHelperProcess") }

// TestConformanceFutexDoorbell runs the suite with the progress
// goroutines sleeping on the doorbell futex, as where no FIFO can be made
// beside the segments; with the FIFO (the default) every rank must have
// one and ring its peers' (see bell_linux.go).
func TestConformanceFutexDoorbell(t *testing.T) {
	ts, errs := connectWorld(t, 2, func(int) Options { return Options{Prefix: testPrefix, RingBytes: 1 << 20} })
	for r, tr := range ts {
		if errs[r] != nil {
			t.Fatalf("rank %d: %v", r, errs[r])
		}
		if tr.bell == nil || tr.peers[1-r].peerBell < 0 {
			t.Errorf("rank %d: bell %v, peer's FIFO descriptor %d: want the FIFO doorbell by default", r, tr.bell, tr.peers[1-r].peerBell)
		}
		tr.Close()
	}
	newFutexWorld := worldWith(func(o *Options) { o.noBell = true }, func(_ int, tr *Transport) error {
		for _, p := range tr.peers {
			if tr.bell != nil || p != nil && p.peerBell >= 0 {
				return fmt.Errorf("a FIFO doorbell although none was wanted")
			}
		}
		return nil
	})
	transporttest.Run(t, newFutexWorld, transporttest.Config{})
	if files := leftovers(t); len(files) > 0 {
		t.Errorf("files left in /dev/shm: %v", files)
	}
}

// TestBellSleep: the doorbell FIFO's sleep ends at its deadline when no
// one rings (the read goes through the poller, which honours deadlines),
// and at once when a byte came before it.
func TestBellSleep(t *testing.T) {
	b, err := newBell(filepath.Join(t.TempDir(), "seg"))
	if err != nil {
		t.Fatal(err)
	}
	defer b.close()
	defer b.unlink()
	start := time.Now()
	b.sleep(20 * time.Millisecond)
	if d := time.Since(start); d < 15*time.Millisecond || d > 5*time.Second {
		t.Errorf("an unrung sleep of 20ms took %v", d)
	}
	ringFIFO(b.w)
	ringFIFO(b.w)
	start = time.Now()
	b.sleep(5 * time.Second)
	if d := time.Since(start); d > time.Second {
		t.Errorf("a sleep after a ring took %v, want it to return at once", d)
	}
	start = time.Now()
	b.sleep(20 * time.Millisecond) // both bytes were drained
	if d := time.Since(start); d < 15*time.Millisecond {
		t.Errorf("a sleep after a drained ring took %v, want the whole 20ms", d)
	}
}
