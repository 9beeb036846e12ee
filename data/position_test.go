package data

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestPositionDealsEachSampleOnce deals epochs in random turns (world
// sizes and how far each turn got) and checks that, with the last turn
// run to its end, every sample is used at least once and repeats come
// only from the splits' padding.
func TestPositionDealsEachSampleOnce(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := range 200 {
		n := rng.IntN(50)
		turns := 1 + rng.IntN(4)
		t.Run(fmt.Sprintf("trial=%d/n=%d/turns=%d", trial, n, turns), func(t *testing.T) {
			pos := Position{Epoch: rng.IntN(3)}
			used := map[int]int{}
			total, padding := 0, 0
			for k := range turns {
				world := 1 + rng.IntN(5)
				pos.Splits = append(pos.Splits, Split{World: world})
				var shares [][]int
				for r := range world {
					s, err := pos.Share(n, 7, r)
					if err != nil {
						t.Fatal(err)
					}
					shares = append(shares, s)
				}
				left := n
				if k > 0 {
					l, err := pos.Unseen(n, 7, k)
					if err != nil {
						t.Fatal(err)
					}
					left = len(l)
				}
				padding += world*len(shares[0]) - left
				consumed := len(shares[0])
				if k < turns-1 {
					consumed = rng.IntN(len(shares[0]) + 1)
				}
				for _, s := range shares {
					if len(s) != len(shares[0]) {
						t.Fatalf("turn %d: shares of unequal length", k)
					}
					for _, i := range s[:consumed] {
						used[i]++
						total++
					}
				}
				pos.Splits[k].Consumed = consumed
			}
			for i := range n {
				if used[i] == 0 {
					t.Errorf("sample %d never used (position %+v)", i, pos)
				}
			}
			if len(used) != n || total-n > padding {
				t.Errorf("%d uses of %d distinct samples of %d, padding %d (position %+v)", total, len(used), n, padding, pos)
			}
		})
	}
}

// Resume redeals at another world size only, and counts the batches left:
// the rest of this epoch's share, then whole epochs at the new size.
func TestPositionResume(t *testing.T) {
	const n, seed, batch = 100, 3, 8
	for _, tc := range []struct {
		name          string
		pos           Position
		world, epochs int
		wantSteps     int
		wantResized   bool
		wantSplits    int
	}{
		// 2 ranks of 50 each, 20 consumed: 30 left (4 batches) + 1 epoch of 7.
		{"same world", Position{Epoch: 0, Splits: []Split{{World: 2, Consumed: 20}}}, 2, 2, 4 + 7, false, 1},
		// 60 samples unseen, dealt over 3 ranks: 20 each (3 batches) + 1 epoch of 34 (5).
		{"resized", Position{Epoch: 0, Splits: []Split{{World: 2, Consumed: 20}}}, 3, 2, 3 + 5, true, 2},
		{"job ended", StartOf(2, 2), 3, 2, 0, false, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := tc.pos
			steps, resized, err := p.Resume(tc.world, tc.epochs, n, seed, 0, batch)
			if err != nil {
				t.Fatal(err)
			}
			if steps != tc.wantSteps || resized != tc.wantResized || len(p.Splits) != tc.wantSplits {
				t.Errorf("Resume = %d steps, resized %v, %d splits; want %d, %v, %d", steps, resized, len(p.Splits), tc.wantSteps, tc.wantResized, tc.wantSplits)
			}
		})
	}
}
