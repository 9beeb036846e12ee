package data

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestReshardExactlyOnce: after every old rank consumed k indices, the
// unseen indices split among a new world size complete the epoch: every
// index of the old epoch is seen exactly once (up to the padding of the
// new split), for both index strategies.
func TestReshardExactlyOnce(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for trial := range 60 {
		n := rng.IntN(200)
		oldW, newW := 1+rng.IntN(8), 1+rng.IntN(8)
		st := []Strategy{Random, Contiguous}[trial%2]
		drop := rng.IntN(2) == 0
		t.Run(fmt.Sprintf("%s/n=%d/world=%d→%d/drop_last=%v", st, n, oldW, newW, drop), func(t *testing.T) {
			mk := NewDistributedSampler
			if st == Contiguous {
				mk = NewContiguousSampler
			}
			old, err := mk(n, oldW, 0, true, 11, drop)
			if err != nil {
				t.Fatal(err)
			}
			k := rng.IntN(old.Len() + 1)
			seen := map[int]int{}
			for r := range oldW {
				s, _ := mk(n, oldW, r, true, 11, drop)
				for _, i := range s.Indices(2)[:k] {
					seen[i]++
				}
			}
			unseen, err := old.Unseen(2, k)
			if err != nil {
				t.Fatal(err)
			}
			count := map[int]int{}
			padded := 0
			for r := range newW {
				ls, err := NewListSampler(unseen, newW, r, false)
				if err != nil {
					t.Fatal(err)
				}
				for _, i := range ls.Indices(0) {
					if seen[i] > 0 {
						t.Fatalf("index %d handed out again after being consumed", i)
					}
					count[i]++
				}
				padded += ls.Len()
			}
			for _, i := range unseen {
				if count[i] == 0 {
					t.Fatalf("unseen index %d never handed out", i)
				}
			}
			if padded-len(unseen) >= newW && len(unseen) > 0 {
				t.Fatalf("%d padding indices for world %d", padded-len(unseen), newW)
			}
			// Everything the old epoch would have covered is covered.
			for _, i := range old.Global(2) {
				if seen[i]+count[i] == 0 {
					t.Fatalf("index %d of the epoch lost in the reshard", i)
				}
			}
		})
	}
	if _, err := (&DistributedSampler{length: 4, numReplicas: 2}).Unseen(0, 3); err == nil {
		t.Fatal("consumed beyond Len accepted")
	}
}
