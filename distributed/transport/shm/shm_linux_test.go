package shm

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/cohortml/cohort/distributed/transport/transporttest"
)

const testPrefix = "cohort-test"

// connectWorld sets up n ranks with opts, as separate processes would.
func connectWorld(tb testing.TB, n int, opts func(rank int) Options) ([]*Transport, []error) {
	tb.Helper()
	return transporttest.ConnectWorld[*Transport](tb, n, func(ctx context.Context, r int) (*Listener, error) {
		return Listen(ctx, r, n, opts(r))
	})
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
		for r, t := range ts {
			if check != nil && errs[r] == nil {
				if err := check(r, t); err != nil {
					errs[r] = err
				}
			}
		}
		return transporttest.WorldOf(tb, ts, errs, (*Transport).kill)
	}
}

// leftovers lists this package's test files in /dev/shm.
func leftovers(t *testing.T) []string {
	return transporttest.Leftovers(t, filepath.Join("/dev/shm", testPrefix+"-*"))
}

// checkLeftovers fails t if any of this package's test files is left in
// /dev/shm.
func checkLeftovers(t *testing.T) {
	t.Helper()
	if files := leftovers(t); len(files) > 0 {
		t.Errorf("files left in /dev/shm: %v", files)
	}
}

func TestConformance(t *testing.T) {
	transporttest.Run(t, newWorld, transporttest.Config{})
	checkLeftovers(t)
}

// procSetup listens with the ring size and spin of the environment, for
// benchmark experiments.
var procSetup = transporttest.ListenSetup[*Transport](func(ctx context.Context, rank, world int) (*Listener, error) {
	opts := Options{Token: []byte("process-token"), Prefix: testPrefix}
	if v, err := strconv.ParseInt(os.Getenv("COHORT_SHM_TEST_RING_BYTES"), 10, 64); err == nil {
		opts.RingBytes = v
	}
	if v, err := time.ParseDuration(os.Getenv("COHORT_SHM_TEST_SPIN")); err == nil {
		opts.Spin = v
	}
	return Listen(ctx, rank, world, opts)
})

// TestHelperProcess is the body of the child processes of the tests below.
func TestHelperProcess(t *testing.T) { transporttest.HelperProcess(procSetup) }

// TestProcessesExchange: ranks in separate processes exchange messages
// of every size.
func TestProcessesExchange(t *testing.T) { procTests.Exchange(t) }

// TestProcessesKill9: SIGKILL one rank in the middle of large transfers;
// every survivor must get an error naming it within 5 s, and no file is
// left behind.
func TestProcessesKill9(t *testing.T) { procTests.Kill9(t) }

var procTests = transporttest.ProcessTests{AfterKill: checkLeftovers}

// BenchmarkTransport runs transporttest's benchmarks.
func BenchmarkTransport(b *testing.B) { transporttest.Benchmarks(b, newWorld) }

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
	checkLeftovers(t)
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
