// Package memtest is the conformance suite every alloc.Mem passes: the
// fake device of the tests and the CUDA one on a GPU, so that what the
// allocator's transcripts establish on the fake holds on the device.
package memtest

import (
	"errors"
	"testing"

	"github.com/cohortml/cohort/device/alloc"
)

// Run checks m. Streams s1 and s2 must be distinct streams of m's device
// on which no other work is queued.
func Run(t *testing.T, m alloc.Mem, s1, s2 alloc.Stream) {
	t.Run("alloc-free", func(t *testing.T) {
		_, total, err := m.Info()
		if err != nil || total <= 0 {
			t.Fatalf("Info: total %d, %v", total, err)
		}
		var ptrs []alloc.Ptr
		for _, n := range []int64{512, 2 << 20, 3<<20 + 512} {
			p, err := m.Alloc(n)
			if err != nil {
				t.Fatalf("Alloc(%d): %v", n, err)
			}
			if p == 0 || p%alloc.MinBlockBytes != 0 {
				t.Errorf("Alloc(%d) = %#x: want a non-zero address aligned to %d", n, p, alloc.MinBlockBytes)
			}
			for _, q := range ptrs {
				if q == p {
					t.Errorf("Alloc(%d) returned the live address %#x again", n, p)
				}
			}
			ptrs = append(ptrs, p)
		}
		for _, p := range ptrs {
			if err := m.Free(p); err != nil {
				t.Errorf("Free(%#x): %v", p, err)
			}
		}
	})
	t.Run("full", func(t *testing.T) {
		free, total, _ := m.Info()
		_, err := m.Alloc(total + 1<<30)
		if !errors.Is(err, alloc.ErrMemFull) {
			t.Errorf("Alloc beyond the device (total %d, free %d): %v, want ErrMemFull", total, free, err)
		}
	})
	t.Run("events", func(t *testing.T) {
		e1, err := m.RecordEvent(s1)
		if err != nil {
			t.Fatal(err)
		}
		e2, err := m.RecordEvent(s2)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range []alloc.Event{e1, e2} {
			if err := m.SyncEvent(e); err != nil {
				t.Fatalf("SyncEvent: %v", err)
			}
			if done, err := m.EventDone(e); !done || err != nil {
				t.Errorf("EventDone after SyncEvent = %v, %v; want true", done, err)
			}
			if err := m.DestroyEvent(e); err != nil {
				t.Errorf("DestroyEvent: %v", err)
			}
		}
	})
	t.Run("allocator", func(t *testing.T) {
		a := alloc.New(m)
		b, err := a.Alloc(1000, s1)
		if err != nil {
			t.Fatal(err)
		}
		a.RecordStream(b, s2)
		if err := a.Free(b); err != nil {
			t.Fatal(err)
		}
		if err := a.EmptyCache(); err != nil {
			t.Fatal(err)
		}
		if st := a.Stats(); st.ReservedBytes != 0 || st.PendingBytes != 0 || st.DeviceAllocs != st.DeviceFrees {
			t.Errorf("after a cross-stream free and EmptyCache: %v", st)
		}
	})
}
