package transporttest

import (
	"context"
	"fmt"
	"testing"

	"github.com/cohortml/cohort/distributed/transport"
)

// Benchmarks runs the shared benchmarks as sub-benchmarks of b, each
// over a world of two ranks that newWorld builds and b closes:
// PingPong4KiB, Exchange4KiB, Throughput16MiB and Exchange16MiB.
func Benchmarks(b *testing.B, newWorld Factory) {
	for _, bm := range []struct {
		name string
		run  func(*testing.B, World, int)
		size int
	}{
		{"PingPong4KiB", PingPong, 4 << 10},
		{"Exchange4KiB", Exchange, 4 << 10},
		{"Throughput16MiB", Throughput, 16 << 20},
		{"Exchange16MiB", Exchange, 16 << 20},
	} {
		b.Run(bm.name, func(b *testing.B) {
			w := newWorld(b, 2)
			b.Cleanup(func() {
				for _, tr := range w.Transports {
					tr.Close()
				}
			})
			bm.run(b, w, bm.size)
		})
	}
}

// The benchmarks below use b.N rather than b.Loop: the peer goroutine has
// to know in advance how many messages to expect.

// PingPong measures the round trip of a size-byte message between ranks 0
// and 1 of w: rank 0 sends, rank 1 echoes. It reports µs/roundtrip.
func PingPong(b *testing.B, w World, size int) {
	rounds(b, w, size, transport.Tag{Group: 100}, 2, "µs/roundtrip", func(ctx context.Context, t1 transport.Transport, tag transport.Tag, _, in []byte) error {
		if err := t1.Recv(ctx, 0, tag, in); err != nil {
			return err
		}
		return t1.Send(ctx, 0, tag, in)
	})
}

// Throughput measures a one-way stream of size-byte messages from rank 0
// to rank 1 of w, the receiver posting each receive as soon as the last
// one completes, and the clock stopping when the receiver acknowledges
// the last. Bytes per second go through b.SetBytes.
func Throughput(b *testing.B, w World, size int) {
	ctx := context.Background()
	t0, t1 := w.Transports[0], w.Transports[1]
	tag := transport.Tag{Group: 102}
	ack := transport.Tag{Group: 103}
	p, out := make([]byte, size), Pattern(size, 1)
	b.SetBytes(int64(size))
	twoSides(b, b.N,
		func() error { return t0.Send(ctx, 1, tag, out) }, func() error { return t0.Recv(ctx, 1, ack, nil) },
		func() error { return t1.Recv(ctx, 0, tag, p) }, func() error { return t1.Send(ctx, 0, ack, nil) })
}

// Exchange measures ranks 0 and 1 each sending a size-byte message to the
// other and then receiving the other's, as one step of a two-rank
// all-reduce does. It reports µs/exchange.
func Exchange(b *testing.B, w World, size int) {
	rounds(b, w, size, transport.Tag{Group: 104}, 1, "µs/exchange", func(ctx context.Context, t1 transport.Transport, tag transport.Tag, out, in []byte) error {
		if err := t1.Send(ctx, 0, tag, out); err != nil {
			return err
		}
		return t1.Recv(ctx, 0, tag, in)
	})
}

// rounds times b.N rounds in each of which rank 0 of w sends a size-byte
// message to rank 1 under tag, then receives one from it, while rank 1
// runs its half of the round, peer, in a goroutine of its own (with
// buffers out and in of size bytes). Each round counts size·copies bytes;
// the time per round is reported in unit.
func rounds(b *testing.B, w World, size int, tag transport.Tag, copies int64, unit string, peer func(ctx context.Context, t1 transport.Transport, tag transport.Tag, out, in []byte) error) {
	ctx := context.Background()
	t0, t1 := w.Transports[0], w.Transports[1]
	n := b.N
	out0, in0 := make([]byte, size), make([]byte, size)
	out1, in1 := make([]byte, size), make([]byte, size)
	b.SetBytes(copies * int64(size))
	twoSides(b, n, func() error {
		if err := t0.Send(ctx, 1, tag, out0); err != nil {
			return err
		}
		return t0.Recv(ctx, 1, tag, in0)
	}, nil, func() error { return peer(ctx, t1, tag, out1, in1) }, nil)
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/1e3/float64(n), unit)
}

// twoSides times n steps of rank 0, zero and then zeroLast once, while
// rank 1 runs n steps of its own, one and then oneLast once, in a
// goroutine; a last may be nil. The first error of either side fails b,
// rank 1's once the clock has stopped.
func twoSides(b *testing.B, n int, zero, zeroLast, one, oneLast func() error) {
	done := make(chan error, 1)
	go func() {
		for range n {
			if err := one(); err != nil {
				done <- err
				return
			}
		}
		if oneLast != nil {
			done <- oneLast()
			return
		}
		done <- nil
	}()
	b.ResetTimer()
	for range n {
		if err := zero(); err != nil {
			b.Fatal(err)
		}
	}
	if zeroLast != nil {
		if err := zeroLast(); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	if err := <-done; err != nil {
		b.Fatal(err)
	}
}

// ProcessBenchmarks runs between child processes of the test binary: the
// 4 KiB ping-pong, 4 KiB all-pairs exchanges at world 2 and 4, the 16 MiB
// stream and the 16 MiB exchange, and reports medians. helperTest names
// the package's TestHelperProcess. The sub-benchmarks measure a fixed
// number of iterations whatever b.N is; run them with -benchtime=1x.
func ProcessBenchmarks(b *testing.B, helperTest string) {
	b.Run("PingPong4KiB", func(b *testing.B) {
		med, mean := ProcessBench(b, helperTest, ScenarioPingPong, 2, 4<<10, 20000)
		b.ReportMetric(med/1e3, "µs/roundtrip")
		b.ReportMetric(mean/1e3, "µs/roundtrip-mean")
	})
	for _, world := range []int{2, 4} {
		b.Run(fmt.Sprintf("Exchange4KiB/world=%d", world), func(b *testing.B) {
			med, mean := ProcessBench(b, helperTest, ScenarioExchangeAll, world, 4<<10, 10000)
			b.ReportMetric(med/1e3, "µs/round")
			b.ReportMetric(mean/1e3, "µs/round-mean")
		})
	}
	b.Run("Stream16MiB", func(b *testing.B) {
		_, bps := ProcessBench(b, helperTest, ScenarioStream, 2, 16<<20, 100)
		b.ReportMetric(bps/1e9, "GB/s")
	})
	b.Run("Exchange16MiB", func(b *testing.B) {
		med, _ := ProcessBench(b, helperTest, ScenarioExchangeAll, 2, 16<<20, 50)
		b.ReportMetric(med/1e3, "µs/round")
		b.ReportMetric(float64(16<<20)/med, "GB/s-each-way")
	})
}
