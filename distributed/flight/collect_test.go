package flight

import (
	"log/slog"
	"strings"
	"time"

	"context"
	"errors"
	"fmt"
	"github.com/cohortml/cohort/distributed/internal/logtest"
	"testing"
)

type mapGetter map[string][]byte

func (m mapGetter) Get(_ context.Context, key string) ([]byte, error) {
	if b, ok := m[key]; ok {
		return b, nil
	}
	return nil, errors.New("absent")
}

// TestCollect: this rank's own snapshot at its index, the published ones
// read under their keys, nil for a rank that has not published and for
// one whose bytes do not decode.
func TestCollect(t *testing.T) {
	ranks := []int{4, 5, 6, 7}
	st := mapGetter{"k1": Encode(Snapshot{Rank: 5}), "k3": []byte("not a snapshot")}
	snaps := Collect(context.Background(), st, func(p int) string { return fmt.Sprint("k", p) }, ranks, 0, Snapshot{Rank: 4})
	if len(snaps) != 4 || snaps[0] == nil || snaps[0].Rank != 4 || snaps[1] == nil || snaps[1].Rank != 5 || snaps[2] != nil || snaps[3] != nil {
		t.Fatalf("Collect = %+v: want [own, rank 5's, nil, nil]", snaps)
	}
}

// TestSurvive: a panic on a watchdog's goroutine is logged, naming the
// rank, and goes no further.
func TestSurvive(t *testing.T) {
	var logs logtest.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer Survive(log, 3)
		panic("boom")
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the panicking goroutine has not ended after 10 s")
	}
	if got := logs.String(); !strings.Contains(got, "distributed: watchdog: rank 3: panic: boom (watchdog stopped)") {
		t.Errorf("log %q, want the panic named", got)
	}
}
