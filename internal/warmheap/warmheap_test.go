package warmheap

import (
	"runtime/debug"
	"strings"
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
		keep                bool
		wantPercent         int
		wantHeadroomAtLeast uint64
	}{
		// LeNet on a Zen 5 guest: 184 MiB live, faults at 9 µs: 0.4 s of
		// faults ahead, ~85 steps; a GC of 3 ms is 1 % of 60 steps of 5 ms.
		{"dear-faults", 854 << 10, 184 * mib, 5 * time.Millisecond, 3 * time.Millisecond, 9 * time.Microsecond, 100, false, 28, 50 * mib},
		// The same with the collector the user's: the goal stays, its
		// growth (184 MiB at GOGC 100) is touched ahead.
		{"dear-faults-keep", 854 << 10, 184 * mib, 5 * time.Millisecond, 3 * time.Millisecond, 9 * time.Microsecond, 100, true, 100, 184 * mib},
		// The same where a fault costs 0.25 µs: 12 ms ahead, 2.4 steps:
		// not worth a lower goal, but touched ahead (12 ms, paid anyway).
		{"cheap-faults", 854 << 10, 184 * mib, 5 * time.Millisecond, 3 * time.Millisecond, 250 * time.Nanosecond, 100, false, 100, 184 * mib},
		// Cheaper still: 0.6 ms ahead, under a step: nothing.
		{"cheapest-faults", 854 << 10, 184 * mib, 5 * time.Millisecond, 3 * time.Millisecond, 12 * time.Nanosecond, 100, false, 100, 0},
		// A GPipe stage of GPT-mini: 49 MiB live, 4.3 MiB of garbage a
		// step of 46 ms, faults at 11 µs: 0.14 s ahead, 3 steps, under
		// worthSteps; the growth is touched ahead.
		{"gpipe-stage", 4400 << 10, 49 * mib, 46 * time.Millisecond, 5 * time.Millisecond, 11 * time.Microsecond, 100, false, 100, 49 * mib},
		// Little garbage: the floor of 4 MiB.
		{"floor", 10 << 10, 200 * mib, 5 * time.Millisecond, time.Millisecond, 9 * time.Microsecond, 100, false, 2, MinHeadroomBytes},
		// A small live heap, much garbage: lowering would not lower; the
		// growth is touched ahead.
		{"small-live", 4 * mib, 8 * mib, 5 * time.Millisecond, time.Millisecond, 20 * time.Microsecond, 100, false, 100, 8 * mib},
		{"gc-off", mib, 100 * mib, time.Millisecond, time.Millisecond, 9 * time.Microsecond, -1, false, -1, 0},
		{"no-steps", mib, 100 * mib, 0, time.Millisecond, 9 * time.Microsecond, 100, false, 100, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := Plan(c.stepBytes, c.step, c.live, c.gc, c.fault, c.percent, c.keep)
			if got.Percent != c.wantPercent {
				t.Errorf("percent %d, want %d (%+v)", got.Percent, c.wantPercent, got)
			}
			if got.HeadroomBytes < c.wantHeadroomAtLeast || (c.wantHeadroomAtLeast == 0) != (got.HeadroomBytes == 0) {
				t.Errorf("headroom %d, want ≥ %d (0 only when nothing is touched)", got.HeadroomBytes, c.wantHeadroomAtLeast)
			}
			if got.HeadroomBytes > 0 && got.HeadroomBytes > uint64(got.Percent)*c.live/100 {
				t.Errorf("headroom %d above what percent %d allows over %d live", got.HeadroomBytes, got.Percent, c.live)
			}
			if c.keep && got.Percent != c.percent {
				t.Errorf("percent %d changed from the user's %d", got.Percent, c.percent)
			}
		})
	}
}

// Fit with Keep measures and leaves the collector's percent alone; where
// faults are dear it still touches the growth that percent allows.
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
	if d.Steps != 3 || d.Percent != 100 || d.Lowered || d.FaultCost < time.Second {
		t.Fatalf("decision %+v: want 3 steps measured, the percent kept, the extra fault cost counted", d)
	}
	if d.HeadroomBytes != d.LiveBytes || d.PrefaultedBytes > d.HeadroomBytes {
		t.Fatalf("decision %+v: want the growth GOGC 100 allows (the live heap) touched, at most all of it fresh", d)
	}
	if !strings.Contains(d.String(), "kept, its growth") {
		t.Fatalf("description %q does not say the growth was touched", d)
	}
}

// A Loop fits once, after the first step and LoopSteps more; Finish fits
// a shorter warm-up; COHORT_FIT_HEAP=0 turns it off; GOGC in the
// environment makes the collector the user's.
func TestLoop(t *testing.T) {
	before := debug.SetGCPercent(100)
	defer debug.SetGCPercent(before)
	t.Setenv("GOGC", "100") // the percent must not move in this test
	l := NewLoop(Options{})
	if !l.opts.Keep {
		t.Fatal("GOGC set, but the Loop may change the collector")
	}
	for i := 1; i <= LoopSteps+3; i++ {
		_, ok := l.Step()
		if ok != (i == LoopSteps+1) {
			t.Fatalf("step %d: fitted %v", i, ok)
		}
	}
	if _, ok := l.Finish(); ok {
		t.Fatal("Finish fitted again")
	}
	short := NewLoop(Options{})
	if _, ok := short.Finish(); ok {
		t.Fatal("Finish fitted before any step was measured")
	}
	short.Step()
	short.Step()
	if d, ok := short.Finish(); !ok || d.Steps != 1 {
		t.Fatalf("Finish after 2 steps: fitted %v, %d steps measured; want 1", ok, d.Steps)
	}
	t.Setenv("COHORT_FIT_HEAP", "0")
	off := NewLoop(Options{})
	if off != nil {
		t.Fatal("COHORT_FIT_HEAP=0, but a Loop")
	}
	if _, ok := off.Step(); ok {
		t.Fatal("a nil Loop fitted")
	}
	if p := debug.SetGCPercent(100); p != 100 {
		t.Fatalf("GC percent %d after Loops with GOGC set, want 100", p)
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
