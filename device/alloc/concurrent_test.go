package alloc_test

import (
	"sync"
	"testing"

	"github.com/cohortml/cohort/device/alloc"
	"github.com/cohortml/cohort/device/fakedev"
)

// Goroutines allocating and freeing on their own streams at once leave
// the counters balanced (run with -race to check the locking).
func TestConcurrentUse(t *testing.T) {
	dev := fakedev.New(256 << 20)
	a := alloc.New(dev)
	const workers, rounds = 4, 200
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			var held []*alloc.Block
			for i := range rounds {
				b, err := a.Alloc(int64(1+(i*7919+w*104729)%(3<<20)), alloc.Stream(w))
				if err != nil {
					errs <- err
					return
				}
				held = append(held, b)
				if len(held) > 8 {
					if err := a.Free(held[0]); err != nil {
						errs <- err
						return
					}
					held = held[1:]
				}
			}
			for _, b := range held {
				if err := a.Free(b); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	st := a.Stats()
	if st.AllocatedBytes != 0 || st.Allocs != workers*rounds || st.Frees != workers*rounds || st.ReservedBytes != dev.Used() {
		t.Fatalf("after balanced use: %v (device used %d)", st, dev.Used())
	}
	if err := a.EmptyCache(); err != nil || dev.Used() != 0 {
		t.Fatalf("EmptyCache: %v, device used %d", err, dev.Used())
	}
}
