package memstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/cohortml/cohort/distributed/store"
	"github.com/cohortml/cohort/distributed/store/memstore"
	"github.com/cohortml/cohort/distributed/store/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, storetest.InProcess(func() store.Store { return memstore.New() }))
}

// TestAbandonedWaitersLeaveNothing checks that Get and Wait calls whose
// context ends unregister themselves, so keys that are never set do not
// accumulate.
func TestAbandonedWaitersLeaveNothing(t *testing.T) {
	s := memstore.New()
	defer s.Close()
	for i := range 100 {
		ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
		if i%2 == 0 {
			s.Get(ctx, "never")
		} else {
			s.Wait(ctx, "never", "other")
		}
		cancel()
	}
	if n := s.Waiters(); n != 0 {
		t.Fatalf("Waiters() = %d after every caller gave up; want 0", n)
	}
	if n := s.Len(); n != 0 {
		t.Fatalf("Len() = %d; want 0 (no key was set)", n)
	}
}

func TestAddOverflow(t *testing.T) {
	s := memstore.New()
	defer s.Close()
	ctx := context.Background()
	tests := []struct {
		name  string
		start string
		delta int64
	}{
		{"up", "9223372036854775807", 1},
		{"down", "-9223372036854775808", -1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := s.Set(ctx, tc.name, []byte(tc.start)); err != nil {
				t.Fatal(err)
			}
			if got, err := s.Add(ctx, tc.name, tc.delta); err == nil {
				t.Fatalf("Add(%s, %d) = %d, nil; want an overflow error", tc.start, tc.delta, got)
			}
			if v, _ := s.Get(ctx, tc.name); string(v) != tc.start {
				t.Fatalf("value after failed Add = %q; want %q unchanged", v, tc.start)
			}
		})
	}
}
