package distributedtest_test

import (
	"context"
	"sync"
	"testing"

	"github.com/cohortml/cohort/distributed"
	"github.com/cohortml/cohort/distributed/distributedtest"
)

// TestRun: every rank of the world runs once, with its own group of the
// right size, and the groups talk to each other.
func TestRun(t *testing.T) {
	defer distributedtest.CheckLeaks(t)()
	for _, world := range []int{1, 2, 5} {
		var mu sync.Mutex
		seen := map[int]int{}
		distributedtest.Run(t, world, func(t *testing.T, pg distributed.ProcessGroup) {
			if pg.Size() != world {
				t.Errorf("rank %d: size %d, want %d", pg.Rank(), pg.Size(), world)
			}
			buf := []int64{1}
			if err := pg.AllReduce(context.Background(), distributed.I64(buf), distributed.Sum).Wait(); err != nil || buf[0] != int64(world) {
				t.Errorf("rank %d: all-reduce gave %v, %v", pg.Rank(), buf, err)
			}
			mu.Lock()
			seen[pg.Rank()]++
			mu.Unlock()
		})
		for r := range world {
			if seen[r] != 1 {
				t.Errorf("world %d: rank %d ran %d times", world, r, seen[r])
			}
		}
	}
}

func TestRanks(t *testing.T) {
	if got := distributedtest.Ranks(3); len(got) != 3 || got[0] != 0 || got[2] != 2 {
		t.Errorf("Ranks(3) = %v", got)
	}
}
