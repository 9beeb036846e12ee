package native_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cohortml/cohort/distributed"
	"github.com/cohortml/cohort/distributed/backend/native"
	"github.com/cohortml/cohort/distributed/transport"
	"github.com/cohortml/cohort/distributed/transport/inproc"
)

// opsOnly is a transport whose receives for the group's ops never deliver
// (they return when ctx ends); abort notices, which travel under the
// group's last sequence number, still arrive. A rank on it cannot detect a
// mismatch itself: it can only be told.
type opsOnly struct{ transport.Transport }

func (o opsOnly) Recv(ctx context.Context, from int, tag transport.Tag, p []byte) error {
	if tag.Seq != ^uint64(0) {
		<-ctx.Done()
		return ctx.Err()
	}
	return o.Transport.Recv(ctx, from, tag, p)
}

// TestDesyncEveryRankNamesBothCalls: rank 1 broadcasts 100 float32s while
// ranks 0 and 2 all-reduce them, so first messages differ in length
// (header alone versus header and data). Whichever rank detects it, every
// rank's error wraps ErrAborted and names both calls and the odd rank: the
// detector's directly, the others' through its abort notice. Detection is
// forced onto one rank by making the others unable to receive op messages.
func TestDesyncEveryRankNamesBothCalls(t *testing.T) {
	const world = 3
	bcast := "broadcast(float32×100, root 0)"
	allreduce := "allreduce(float32×100, sum)"
	// Rank 0's plan takes nothing from rank 1 before checking its left
	// neighbour (rank 2, which agrees with it), so it is not a detector
	// on its own: ranks 1 and 2 are.
	for _, detector := range []int{1, 2} {
		for rep := range 3 {
			t.Run("detector="+string(rune('0'+detector))+"/rep="+string(rune('0'+rep)), func(t *testing.T) {
				mesh := inproc.NewMesh(world)
				groups := make([]distributed.ProcessGroup, world)
				for r := range world {
					var tr transport.Transport = mesh[r]
					if r != detector {
						tr = opsOnly{mesh[r]}
					}
					pg, err := native.New(tr, distributed.GroupOptions{Timeout: 20 * time.Second})
					if err != nil {
						t.Fatal(err)
					}
					groups[r] = pg
				}
				defer func() {
					for _, pg := range groups {
						pg.Close()
					}
				}()
				start := time.Now()
				errs := make([]error, world)
				var wg sync.WaitGroup
				for r, pg := range groups {
					wg.Go(func() {
						buf := distributed.F32(make([]float32, 100))
						if r == 1 {
							errs[r] = pg.Broadcast(context.Background(), buf, 0).Wait()
						} else {
							errs[r] = pg.AllReduce(context.Background(), buf, distributed.Sum).Wait()
						}
					})
				}
				wg.Wait()
				if d := time.Since(start); d > 5*time.Second {
					t.Errorf("desync took %v to surface", d)
				}
				for r, err := range errs {
					if !errors.Is(err, distributed.ErrAborted) {
						t.Errorf("rank %d: %v, want ErrAborted", r, err)
						continue
					}
					msg := err.Error()
					for _, s := range []string{bcast, allreduce, "rank 1", "seq 1"} {
						if !strings.Contains(msg, s) {
							t.Errorf("rank %d: error %q lacks %q", r, msg, s)
						}
					}
					if r != detector && !strings.Contains(msg, "aborted by rank") {
						t.Errorf("rank %d: error %q does not come from the detector's notice", r, msg)
					}
				}
			})
		}
	}
}
