package flight

import (
	"context"
	"fmt"
	"sync"
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
