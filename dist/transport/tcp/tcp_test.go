package tcp

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"cohort/dist/transport/transporttest"
)

// connectWorld sets up n ranks on loopback with opts, each in its own
// goroutine as separate processes would.
func connectWorld(tb testing.TB, n int, opts func(rank int) Options) ([]*Transport, []error) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ls := make([]*Listener, n)
	addrs := make([]string, n)
	for r := range n {
		l, err := Listen(ctx, r, n, "127.0.0.1:0", opts(r))
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

func newWorld(tb testing.TB, n int) transporttest.World {
	return worldWith(Options{})(tb, n)
}

// worldWith returns a world maker whose ranks use o (with a token).
func worldWith(o Options) func(tb testing.TB, n int) transporttest.World {
	return func(tb testing.TB, n int) transporttest.World { return connectWith(tb, n, o) }
}

func connectWith(tb testing.TB, n int, o Options) transporttest.World {
	o.Token = []byte("test-token")
	ts, errs := connectWorld(tb, n, func(int) Options { return o })
	for r, err := range errs {
		if err != nil {
			tb.Fatalf("rank %d: %v", r, err)
		}
	}
	w := transporttest.World{Kill: func(r int) { ts[r].kill() }}
	for _, t := range ts {
		w.Transports = append(w.Transports, t)
	}
	return w
}

func TestConformance(t *testing.T) {
	transporttest.Run(t, newWorld, transporttest.Config{})
}

// TestConformancePolling: receivers poll the socket themselves
// (Options.Spin), taking turns with the reader goroutine, including
// through the frames of long messages (small chunks) and past the end of
// the polling budget.
func TestConformancePolling(t *testing.T) {
	for _, o := range []Options{{Spin: time.Second}, {Spin: time.Microsecond, ChunkBytes: 40 << 10}, {Spin: time.Second, ChunkBytes: 40 << 10}} {
		t.Run(fmt.Sprintf("spin=%v/chunk=%d", o.Spin, o.ChunkBytes), func(t *testing.T) {
			transporttest.Run(t, worldWith(o), transporttest.Config{})
		})
	}
}

func BenchmarkPingPong4KiB(b *testing.B) {
	transporttest.PingPong(b, newWorld(b, 2), 4<<10)
}

func BenchmarkExchange4KiB(b *testing.B) {
	transporttest.Exchange(b, newWorld(b, 2), 4<<10)
}

func BenchmarkExchange4KiBPolling(b *testing.B) {
	transporttest.Exchange(b, worldWith(Options{Spin: 50 * time.Microsecond})(b, 2), 4<<10)
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
