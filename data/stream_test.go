package data

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
)

// seqStream streams the samples of a seqDataset in order; failAt makes
// the stream yield an error there.
type seqStream struct {
	d      *seqDataset
	failAt int
}

func (s seqStream) Iter(ctx context.Context) iter.Seq2[Sample, error] {
	return func(yield func(Sample, error) bool) {
		for i := range s.d.n {
			if i == s.failAt {
				yield(Sample{}, errors.New("stream broke"))
				return
			}
			smp, err := s.d.Get(i)
			if !yield(smp, err) || ctx.Err() != nil {
				return
			}
		}
	}
}

func TestStreamLoader(t *testing.T) {
	for _, workers := range []int{0, 1, 3} {
		for _, drop := range []bool{false, true} {
			t.Run(fmt.Sprintf("workers=%d/drop_last=%v", workers, drop), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					ds := seqStream{d: newSeq(23), failAt: -1}
					l, err := NewStreamLoader(ds, 5, drop, Options{Workers: workers, Prefetch: 2, Seed: 4, Transform: noise})
					if err != nil {
						t.Fatal(err)
					}
					full, err := collect(t, context.Background(), l, -1)
					if err != nil {
						t.Fatal(err)
					}
					want := 5
					if drop {
						want = 4
					}
					if len(full) != want || l.State().Epoch != 1 {
						t.Fatalf("%d batches (epoch after: %d), want %d and 1", len(full), l.State().Epoch, want)
					}
					if got := full[len(full)-1].Indices; !drop && !slices.Equal(got, []int{20, 21, 22}) {
						t.Fatalf("last batch indices %v", got)
					}
					// Resume after 2 batches.
					l.SetEpoch(0)
					head, err := collect(t, context.Background(), l, 2)
					if err != nil {
						t.Fatal(err)
					}
					st := l.State()
					l2, _ := NewStreamLoader(ds, 5, drop, Options{Workers: workers, Seed: 4, Transform: noise})
					if err := l2.Restore(st); err != nil {
						t.Fatal(err)
					}
					tail, err := collect(t, context.Background(), l2, -1)
					if err != nil {
						t.Fatal(err)
					}
					sameBatches(t, append(head, tail...), full)
				})
			})
		}
	}
	t.Run("error", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			l, _ := NewStreamLoader(seqStream{d: newSeq(23), failAt: 12}, 5, false, Options{Workers: 2})
			got, err := collect(t, context.Background(), l, -1)
			if err == nil || !strings.Contains(err.Error(), "sample 12: stream broke") || len(got) != 2 {
				t.Fatalf("%d batches, err %v; want 2 and an error naming sample 12", len(got), err)
			}
		})
	})
	t.Run("cancel", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			l, _ := NewStreamLoader(seqStream{d: newSeq(100), failAt: -1}, 5, false, Options{Workers: 2})
			cancelAfter(t, l, 2)
		})
	})
	t.Run("bad batch size", func(t *testing.T) {
		if _, err := NewStreamLoader(seqStream{d: newSeq(1)}, 0, false, Options{}); err == nil || !strings.Contains(err.Error(), "batch size 0") {
			t.Fatalf("err %v", err)
		}
	})
}
