package tcp

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/cohortml/cohort/distributed/transport"
	"github.com/cohortml/cohort/distributed/transport/transporttest"
)

// connectWorld sets up n ranks on loopback with opts, as separate
// processes would.
func connectWorld(tb testing.TB, n int, opts func(rank int) Options) ([]*Transport, []error) {
	tb.Helper()
	return transporttest.ConnectWorld[*Transport](tb, n, func(ctx context.Context, r int) (*Listener, error) {
		return Listen(ctx, r, n, "127.0.0.1:0", opts(r))
	})
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
	return transporttest.WorldOf(tb, ts, errs, (*Transport).kill)
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

// BenchmarkTransport runs transporttest's benchmarks.
func BenchmarkTransport(b *testing.B) { transporttest.Benchmarks(b, newWorld) }

func BenchmarkExchange4KiBPolling(b *testing.B) {
	transporttest.Exchange(b, worldWith(Options{Spin: 50 * time.Microsecond})(b, 2), 4<<10)
}

// BenchmarkProcesses measures between two real processes; run with
// -benchtime=1x.
func BenchmarkProcesses(b *testing.B) { transporttest.ProcessBenchmarks(b, "TestHelperProcess") }

// TestPeerClosesWhileWriterSpins: a writer that spins on a full socket
// (Options.Spin) advances the link's reader while it holds the write
// lock, and may meet the peer's Close frame there. Its acknowledgement
// goes out once the frame is written: the peer's Close completes with
// it (not by timing out), and the writer's Send returns.
func TestPeerClosesWhileWriterSpins(t *testing.T) {
	w := connectWith(t, 2, Options{Spin: time.Second, CloseTimeout: 20 * time.Second})
	t0, t1 := w.Transports[0].(*Transport), w.Transports[1].(*Transport)
	defer t0.Close()
	// Rank 1 stops reading, so rank 0's socket fills.
	rd := &t1.links[0].rd
	rd.mu.Lock()
	sent := make(chan error, 1)
	go func() {
		p := make([]byte, 1<<20)
		for k := 0; ; k++ {
			if err := t0.Send(context.Background(), 1, transport.Tag{Seq: uint64(k)}, p); err != nil {
				sent <- err
				return
			}
		}
	}()
	time.Sleep(300 * time.Millisecond)
	closed := make(chan time.Duration, 1)
	go func() {
		start := time.Now()
		t1.Close()
		closed <- time.Since(start)
	}()
	time.Sleep(300 * time.Millisecond)
	rd.mu.Unlock()
	select {
	case d := <-closed:
		select {
		case <-t1.links[0].closeAck:
		default:
			t.Errorf("rank 1's Close returned after %v without rank 0's acknowledgement", d)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("rank 1's Close still waiting after 10 s")
	}
	select {
	case err := <-sent:
		checkPeerClosed(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("rank 0's Send still blocked 10 s after rank 1 closed")
	}
}

func checkPeerClosed(t *testing.T, err error) {
	t.Helper()
	var pe *transport.PeerError
	if !errors.As(err, &pe) || pe.Peer != 1 {
		t.Errorf("rank 0's Send after rank 1 closed: %v, want a PeerError naming rank 1", err)
	}
}
