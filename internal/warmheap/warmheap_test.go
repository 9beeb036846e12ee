package warmheap

import (
	"runtime/debug"
	"syscall"
	"testing"
	"time"
)

func TestPlan(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct {
		name                string
		stepBytes, live     uint64
		step, gc, fault     time.Duration
		percent             int
		wantPercent         int
		wantHeadroomAtLeast uint64
	}{
		// LeNet on a Zen 5 guest: 184 MiB live, faults at 9 µs: 0.4 s of
		// faults ahead, ~85 steps; a GC of 3 ms is 1 % of 60 steps of 5 ms.
		{"dear-faults", 854 << 10, 184 * mib, 5 * time.Millisecond, 3 * time.Millisecond, 9 * time.Microsecond, 100, 28, 50 * mib},
		// The same where a fault costs 0.25 µs: 12 ms ahead, under 4 steps.
		{"cheap-faults", 854 << 10, 184 * mib, 5 * time.Millisecond, 3 * time.Millisecond, 250 * time.Nanosecond, 100, 100, 0},
		// Little garbage: the floor of 4 MiB.
		{"floor", 10 << 10, 200 * mib, 5 * time.Millisecond, time.Millisecond, 9 * time.Microsecond, 100, 2, MinHeadroomBytes},
		// A small live heap, much garbage: lowering would not lower.
		{"small-live", 4 * mib, 8 * mib, 5 * time.Millisecond, time.Millisecond, 20 * time.Microsecond, 100, 100, 0},
		{"gc-off", mib, 100 * mib, time.Millisecond, time.Millisecond, 9 * time.Microsecond, -1, -1, 0},
		{"no-steps", mib, 100 * mib, 0, time.Millisecond, 9 * time.Microsecond, 100, 100, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := Plan(c.stepBytes, c.step, c.live, c.gc, c.fault, c.percent)
			if got.Percent != c.wantPercent {
				t.Errorf("percent %d, want %d (%+v)", got.Percent, c.wantPercent, got)
			}
			if got.HeadroomBytes < c.wantHeadroomAtLeast || (c.wantHeadroomAtLeast == 0) != (got.HeadroomBytes == 0) {
				t.Errorf("headroom %d, want ≥ %d (0 only when unchanged)", got.HeadroomBytes, c.wantHeadroomAtLeast)
			}
			if got.HeadroomBytes > 0 && got.HeadroomBytes > uint64(got.Percent)*c.live/100 {
				t.Errorf("headroom %d above what percent %d allows over %d live", got.HeadroomBytes, got.Percent, c.live)
			}
		})
	}
}

// Fit with Keep measures but leaves the collector's percent alone.
func TestFitKeep(t *testing.T) {
	before := debug.SetGCPercent(100)
	defer debug.SetGCPercent(before)
	w := Begin()
	for range 3 {
		_ = make([]byte, 1<<16)
		w.Step()
	}
	d := w.Fit(Options{Keep: true, ExtraFaultCost: time.Second})
	if p := debug.SetGCPercent(100); p != 100 {
		t.Fatalf("GC percent %d after Fit with Keep, want 100", p)
	}
	if d.Steps != 3 || d.HeadroomBytes != 0 || d.Percent != 100 || d.FaultCost < time.Second {
		t.Fatalf("decision %+v: want 3 steps measured, nothing changed, the extra fault cost counted", d)
	}
	if d.String() == "" {
		t.Fatal("empty description")
	}
}

// A nil or zero-cost Tax charges nothing; a Tax counts faults.
func TestTax(t *testing.T) {
	var nilTax *Tax
	nilTax.Pay()
	if nilTax.Paid() != 0 || nilTax.Cost() != 0 {
		t.Fatal("a nil Tax charged")
	}
	z := NewTax(0)
	_ = make([]byte, 1<<20)
	z.Pay()
	if z.Paid() != 0 {
		t.Fatal("a zero-cost Tax charged")
	}
	tax := NewTax(time.Nanosecond)
	b, err := syscall.Mmap(-1, 0, 1<<20, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Munmap(b)
	for i := 0; i < len(b); i += pageSize {
		b[i] = 1
	}
	tax.Pay()
	if tax.Paid() <= 0 {
		t.Fatalf("touching 1 MiB of fresh memory charged %v", tax.Paid())
	}
}

func TestFaultCostAndPrefault(t *testing.T) {
	if FaultCost() < 0 {
		t.Fatal("negative fault cost")
	}
	Prefault(0)
	Prefault(3 << 20)
}
