package native_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/cohortml/cohort/distributed"
	"github.com/cohortml/cohort/distributed/backend/native"
	"github.com/cohortml/cohort/distributed/store/memstore"
	"github.com/cohortml/cohort/distributed/transport/inproc"
)

// benchWorld builds a world of groups on goroutines: over an inproc mesh,
// or over tcp through Init.
func benchWorld(b *testing.B, world int, transport string) []distributed.ProcessGroup {
	b.Helper()
	pgs := make([]distributed.ProcessGroup, world)
	if transport == "inproc" {
		for r, t := range inproc.NewMesh(world) {
			pg, err := native.New(t, distributed.GroupOptions{})
			if err != nil {
				b.Fatal(err)
			}
			pgs[r] = pg
		}
	} else {
		st := memstore.New()
		b.Cleanup(func() { st.Close() })
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		var wg sync.WaitGroup
		errs := make([]error, world)
		for r := range world {
			wg.Go(func() {
				pgs[r], errs[r] = distributed.Init(ctx, distributed.Options{Store: st, Rank: r, WorldSize: world, Transport: transport})
			})
		}
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Cleanup(func() {
		for _, pg := range pgs {
			pg.Close()
		}
	})
	return pgs
}

// BenchmarkAllReduce measures a float32 Sum all-reduce with every rank a
// goroutine of this process: the latency of cohort's own layers (inproc)
// and of the tcp transport on loopback.
func BenchmarkAllReduce(b *testing.B) {
	for _, transport := range []string{"inproc", "shm", "tcp"} {
		for _, world := range []int{2, 4} {
			for _, size := range []int{4 << 10, 1 << 20, 16 << 20} {
				b.Run(fmt.Sprintf("%s/world=%d/bytes=%d", transport, world, size), func(b *testing.B) {
					pgs := benchWorld(b, world, transport)
					bufs := make([][]float32, world)
					for r := range bufs {
						bufs[r] = make([]float32, size/4)
					}
					b.SetBytes(int64(size))
					ctx := context.Background()
					start := make([]chan struct{}, world)
					for r := range start {
						start[r] = make(chan struct{}, 1)
					}
					var wg sync.WaitGroup
					n := b.N
					for r := 1; r < world; r++ {
						wg.Go(func() {
							for range n {
								if err := pgs[r].AllReduce(ctx, distributed.F32(bufs[r]), distributed.Sum).Wait(); err != nil {
									b.Error(err)
									return
								}
							}
						})
					}
					b.ResetTimer()
					for range n {
						if err := pgs[0].AllReduce(ctx, distributed.F32(bufs[0]), distributed.Sum).Wait(); err != nil {
							b.Fatal(err)
						}
					}
					wg.Wait()
					b.StopTimer()
					b.ReportMetric(float64(size)/float64(b.Elapsed().Nanoseconds())*float64(n)*2*float64(world-1)/float64(world), "busbw_GB/s")
				})
			}
		}
	}
}

// BenchmarkOpOverhead measures the cost of an op with nothing to move: a
// world of one (queueing, the op goroutine, plan lookup, executor).
func BenchmarkOpOverhead(b *testing.B) {
	pgs := benchWorld(b, 1, "inproc")
	buf := make([]float32, 1024)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if err := pgs[0].AllReduce(ctx, distributed.F32(buf), distributed.Sum).Wait(); err != nil {
			b.Fatal(err)
		}
	}
}
