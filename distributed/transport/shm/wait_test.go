package shm

import (
	"fmt"
	"testing"
	"time"
)

const us = time.Microsecond

// TestChooseWait: costs in, plan out. The figures are those measured on a
// 2-vCPU AMD EPYC (Zen 5) KVM guest (wake-up 20 µs, yield 1.3 µs), on a
// bare-metal Xeon (wake-up about 4 µs, yield 0.5 µs), and made-up ones at
// the edges.
func TestChooseWait(t *testing.T) {
	zen, xeon := 20*us, 4*us
	for _, c := range []struct {
		name  string
		costs Costs
		want  WaitPlan // Why not compared
	}{
		{"fit/no samples yet: assumed wake-up", Costs{Wake: 3 * us, WakeSamples: 2, Yield: 1300, Ranks: 2, CPUs: 2}, WaitPlan{Spin: 16 * assumedWake, RawSleep: 160 * us}},
		{"fit/zen", Costs{Wake: zen, WakeSamples: 100, Yield: 1300, Ranks: 2, CPUs: 2}, WaitPlan{Spin: 320 * us, RawSleep: 160 * us}},
		{"fit/xeon: floor", Costs{Wake: xeon, WakeSamples: 100, Yield: 500, Ranks: 2, CPUs: 2}, WaitPlan{Spin: minSpin, RawSleep: 32 * us}},
		{"fit/wake-up 100µs", Costs{Wake: 100 * us, WakeSamples: 100, Yield: 1300, Ranks: 4, CPUs: 8}, WaitPlan{Spin: 1600 * us, RawSleep: maxRawSleep}},
		{"fit/wake-up 2ms: ceiling", Costs{Wake: 2 * time.Millisecond, WakeSamples: 100, Ranks: 2, CPUs: 2}, WaitPlan{Spin: maxSpin, RawSleep: maxRawSleep}},
		{"fit/CPUs unknown", Costs{Wake: zen, WakeSamples: 100, Ranks: 4}, WaitPlan{Spin: 320 * us, RawSleep: 160 * us}},
		{"oversubscribed/zen: poll and yield", Costs{Wake: zen, WakeSamples: 100, Yield: 1300, Ranks: 4, CPUs: 2}, WaitPlan{Spin: 200 * us, Yield: true, RawSleep: 160 * us}},
		{"oversubscribed/xeon: floor", Costs{Wake: xeon, WakeSamples: 100, Yield: 500, Ranks: 4, CPUs: 2}, WaitPlan{Spin: minYieldSpin, Yield: true, RawSleep: 32 * us}},
		{"oversubscribed/fast wake-up: minimum", Costs{Wake: 500 * time.Nanosecond, WakeSamples: 100, Yield: 100, Ranks: 4, CPUs: 2}, WaitPlan{Spin: minYieldSpin, Yield: true, RawSleep: 4 * us}},
		{"oversubscribed/slow wake-up: ceiling", Costs{Wake: 200 * us, WakeSamples: 100, Yield: 1300, Ranks: 8, CPUs: 2}, WaitPlan{Spin: maxYieldSpin, Yield: true, RawSleep: maxRawSleep}},
		{"oversubscribed/yield dearer than a wake-up: a peer's turn", Costs{Wake: xeon, WakeSamples: 100, Yield: 40 * us, Ranks: 4, CPUs: 2}, WaitPlan{Spin: minYieldSpin, Yield: true, RawSleep: 32 * us}},
		{"oversubscribed/yield took a time slice: sleep", Costs{Wake: zen, WakeSamples: 100, Yield: yieldSlow, Ranks: 4, CPUs: 2}, WaitPlan{RawSleep: 160 * us}},
		{"oversubscribed/yield cost unknown: sleep", Costs{Wake: zen, WakeSamples: 100, Ranks: 3, CPUs: 2}, WaitPlan{RawSleep: 160 * us}},
		{"oversubscribed/no samples yet", Costs{Yield: 1300, Ranks: 4, CPUs: 2}, WaitPlan{Spin: 10 * assumedWake, Yield: true, RawSleep: 160 * us}},
		{"oversubscribed/one CPU", Costs{Wake: zen, WakeSamples: 100, Yield: 1300, Ranks: 2, CPUs: 1}, WaitPlan{Spin: 200 * us, Yield: true, RawSleep: 160 * us}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := chooseWait(c.costs)
			if got.Why == "" {
				t.Errorf("no reason given")
			}
			got.Why = ""
			if got != c.want {
				t.Errorf("chooseWait(%+v) = %+v, want %+v", c.costs, got, c.want)
			}
		})
	}
}

// TestWakeEstimate: the mean follows the samples with weight 1/8 and
// ignores the implausible ones.
func TestWakeEstimate(t *testing.T) {
	var w wakeEstimate
	if d, n := w.get(); d != 0 || n != 0 {
		t.Fatalf("empty estimate %v from %d", d, n)
	}
	w.add(16 * us)
	w.add(0)                         // ignored
	w.add(-us)                       // ignored
	w.add(maxWakeSample + 1)         // ignored
	if n := w.add(24 * us); n != 2 { // 16 + (24-16)/8 = 17
		t.Errorf("%d samples, want 2", n)
	}
	if d, _ := w.get(); d != 17*us {
		t.Errorf("mean %v, want 17µs", d)
	}
	for range 200 {
		w.add(100 * us)
	}
	if d, _ := w.get(); d < 99*us || d > 100*us {
		t.Errorf("mean after 200 samples of 100µs: %v", d)
	}
}

// TestFormatWait: the report names the plan, the figures and an override.
func TestFormatWait(t *testing.T) {
	c := Costs{Wake: 20 * us, WakeSamples: 64, Yield: 1300, Ranks: 4, CPUs: 2, Injected: 20 * us}
	p := chooseWait(c)
	got := formatWait(p, c, 0)
	want := fmt.Sprintf("poll 200µs, yielding the CPU between polls, then sleep, unseen by the runtime for up to 160µs (%s); wake-up 20µs from 64 samples, yield 1.3µs, 20µs injected per wake-up (COHORT_SHM_WAKE_DELAY)", p.Why)
	if got != want {
		t.Errorf("got  %q\nwant %q", got, want)
	}
	if got := formatWait(p, c, 10*time.Millisecond); got[:len("poll 10ms (Options.Spin; the plan's: 200µs)")] != "poll 10ms (Options.Spin; the plan's: 200µs)" {
		t.Errorf("override: %q", got)
	}
}
