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

// BenchmarkAllReduceWatchdog: all-reduce ops/s over inproc at world 2,
// with the watchdog off and on (publishing every 10 ms, far more often
// than the default 15 s, to bound its cost from above). The flight
// recorder itself is always on (BenchmarkFlightRecord).
func BenchmarkAllReduceWatchdog(b *testing.B) {
	for _, n := range []int{256, 1 << 16} {
		for _, on := range []bool{false, true} {
			b.Run(fmt.Sprintf("n=%d/watchdog=%v", n, on), func(b *testing.B) {
				const world = 2
				mesh := inproc.NewMesh(world)
				st := memstore.New()
				defer st.Close()
				groups := make([]distributed.ProcessGroup, world)
				for r := range world {
					pg, err := native.New(mesh[r], distributed.GroupOptions{Timeout: time.Minute})
					if err != nil {
						b.Fatal(err)
					}
					defer pg.Close()
					if on {
						distributed.Watch(pg, st, "bench", distributed.WatchdogOptions{Interval: 40 * time.Millisecond})
					}
					groups[r] = pg
				}
				ctx := context.Background()
				b.SetBytes(int64(4 * n))
				iters := b.N
				b.ResetTimer()
				var wg sync.WaitGroup
				for r := range world {
					wg.Go(func() {
						buf := distributed.F32(make([]float32, n))
						for range iters {
							if err := groups[r].AllReduce(ctx, buf, distributed.Sum).Wait(); err != nil {
								b.Error(err)
								return
							}
						}
					})
				}
				wg.Wait()
			})
		}
	}
}
