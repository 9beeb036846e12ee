package native

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cohortml/cohort/distributed"
	"github.com/cohortml/cohort/distributed/internal/logtest"
	"github.com/cohortml/cohort/distributed/store/memstore"
)

// TestJoinDuplicateRank: two jobs share one store with the default prefix
// and no token (as two hand-started torchrun-style jobs on the same
// MASTER_PORT do). Job B's rank 1 joins job A's rank 0 first; when A's
// real rank 1 arrives it is refused naming the rank, and the group of A's
// rank 0 and B's rank 1 aborts, naming it too, instead of training on.
func TestJoinDuplicateRank(t *testing.T) {
	st := memstore.New()
	defer st.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	opts := func(r int) distributed.Options {
		return distributed.Options{Store: st, Rank: r, WorldSize: 2, Transport: "tcp"}
	}
	pgs := make([]distributed.ProcessGroup, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for r := range 2 {
		wg.Go(func() { pgs[r], errs[r] = Init(ctx, opts(r)) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	defer pgs[0].Close()
	defer pgs[1].Close()
	_, err := Init(ctx, opts(1))
	if err == nil || !strings.Contains(err.Error(), "rank 1 was claimed twice") {
		t.Fatalf("late rank 1: %v, want a duplicate-claim error naming rank 1", err)
	}
	// Both members of the merged group, training on, soon fail their ops,
	// naming rank 1.
	for r, pg := range pgs {
		wg.Go(func() {
			var opErr error
			for i := 0; opErr == nil && i < 100000; i++ {
				opErr = pg.AllReduce(ctx, distributed.F32([]float32{1}), distributed.Sum).Wait()
			}
			if opErr == nil || !errors.Is(opErr, distributed.ErrAborted) || !strings.Contains(opErr.Error(), "rank 1 was claimed twice") {
				t.Errorf("rank %d after the duplicate: %v, want an abort naming the duplicate rank 1", r, opErr)
			}
		})
	}
	wg.Wait()
}

// TestJoinProgressAndTimeout: a rank that never arrives is reported while
// Init waits and named when Group.Timeout ends the wait.
func TestJoinProgressAndTimeout(t *testing.T) {
	st := memstore.New()
	defer st.Close()
	var logs logtest.Buffer
	o := config{Options: distributed.Options{Store: st, Rank: 0, WorldSize: 3, Transport: "tcp", Group: distributed.GroupOptions{Timeout: 400 * time.Millisecond},
		Log: slog.New(slog.NewTextHandler(&logs, nil))}, joinProgress: 100 * time.Millisecond}
	done := make(chan error, 1)
	go func() {
		o1 := o
		o1.Rank, o1.Log = 1, slog.New(slog.DiscardHandler)
		pg, err := initConfig(context.Background(), o1)
		if pg != nil {
			pg.Close()
		}
		done <- err
	}()
	start := time.Now()
	_, err := initConfig(context.Background(), o)
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("Init took %v with a 400ms timeout", d)
	}
	if err == nil || !strings.Contains(err.Error(), "rank 2 has not joined") || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want a deadline error saying rank 2 has not joined", err)
	}
	if err1 := <-done; err1 == nil || !strings.Contains(err1.Error(), "rank 2") {
		t.Errorf("rank 1: %v, want an error naming rank 2", err1)
	}
	if !strings.Contains(logs.String(), "waiting for rank 2 to join") {
		t.Errorf("no progress line in the log:\n%s", logs.String())
	}
}
