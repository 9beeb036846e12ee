package flight

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"
)

// Getter reads one key of the job's store (store.Store is one).
type Getter interface {
	Get(ctx context.Context, key string) ([]byte, error)
}

// Collect gathers the group's last heartbeats for Diagnose: index self
// is mine, every other index p of ranks the snapshot read from st under
// key(p), all read at once until ctx ends; a rank that has not published
// one, or whose bytes do not decode, stays nil. ranks maps group indices
// to global ranks (the names in decode errors).
func Collect(ctx context.Context, st Getter, key func(p int) string, ranks []int, self int, mine Snapshot) []*Snapshot {
	snaps := make([]*Snapshot, len(ranks))
	snaps[self] = &mine
	var wg sync.WaitGroup
	for p := range ranks {
		if p == self {
			continue
		}
		wg.Go(func() {
			b, err := st.Get(ctx, key(p))
			if err != nil {
				return
			}
			if s, err := Decode(b, fmt.Sprintf("rank %d", ranks[p])); err == nil {
				snaps[p] = &s
			}
		})
	}
	wg.Wait()
	return snaps
}

// Claimer is the store operation with which the ranks of a group claim
// the report of a stuck op (store.Store is one).
type Claimer interface {
	CompareAndSwap(ctx context.Context, key string, expected, desired []byte) ([]byte, error)
}

// Claim reports whether rank me is the one to report op seq of group
// (whose keys lie under prefix): the first rank to set
// <prefix>/flight/<group>/reported/<seq> in st. A store that fails counts
// as a claim: better two reports than none.
func Claim(ctx context.Context, st Claimer, prefix string, group uint32, seq uint64, me int) bool {
	mine := []byte(strconv.Itoa(me))
	got, err := st.CompareAndSwap(ctx, fmt.Sprintf("%s/flight/%d/reported/%d", prefix, group, seq), nil, mine)
	return err != nil || string(got) == string(mine)
}

// Survive, deferred by a watchdog's goroutine, stops a panic there: a
// watchdog bug must not take the job down. It logs the panic, naming
// rank, and the watchdog stops.
func Survive(log *slog.Logger, rank int) {
	if p := recover(); p != nil {
		log.Error(fmt.Sprintf("distributed: watchdog: rank %d: panic: %v (watchdog stopped)", rank, p))
	}
}

// Every runs f at once and then every d until ctx is done: a watchdog's
// loop.
func Every(ctx context.Context, d time.Duration, f func()) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		f()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Setter writes one key of the job's store (store.Store is one).
type Setter interface {
	Set(ctx context.Context, key string, value []byte) error
}

// Publish sets s, a rank's heartbeat published every tick, under key in
// st: best effort (a store that is slow or gone shows as a stale
// heartbeat), waiting at most a tick or a second, whichever is longer,
// and not past ctx.
func Publish(ctx context.Context, st Setter, key string, s Snapshot, tick time.Duration) {
	s.Every = int64(tick)
	ctx, cancel := context.WithTimeout(ctx, max(tick, time.Second))
	defer cancel()
	_ = st.Set(ctx, key, Encode(s))
}
