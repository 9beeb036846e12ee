package shm

import (
	"fmt"
	"sync/atomic"
	"time"
)

// How a rank waits for a peer, chosen from what waiting costs on the
// machine it runs on rather than from constants tuned on one machine.
//
// A waiter can poll (a load of the ring's head, a cache-line round trip
// of 0.45 µs between two cores when the peer is running), poll and yield
// its CPU between polls (sched_yield, 1.3 µs on a 2-vCPU AMD EPYC KVM
// guest), or sleep on a futex until the peer wakes it. The wake-up is
// what differs most between machines: 2 to 5 µs on bare-metal Intel
// Xeons, about 20 µs (p99 60 µs) on that guest, where a timer sleep
// (nanosleep) costs 91 µs or more. A waiter that sleeps after a fixed
// spin tuned on a fast-waking machine pays tens of microseconds per
// message on a slow-waking one; one that spins through every wait starves
// its peers when the ranks outnumber the CPUs.
//
// So the transport measures, and chooses (chooseWait, a pure function of
// the figures):
//
//   - the wake-up, observed on every sleep that a sender ends: the sender
//     stamps the ring with the monotonic clock when it rings the futex,
//     and the woken receiver takes the difference (an exponentially
//     weighted mean, wakeEstimate); until a few have been seen,
//     assumedWake stands in for it;
//   - the cost of a sched_yield, timed once per process at Listen (the
//     fastest of 32 calls, tens of microseconds in all);
//   - whether the ranks sharing memory outnumber their CPUs (Options.CPUs).
//
// While the ranks fit their CPUs a waiter polls for spinWakes times the
// wake-up (a wake-up saved is worth that much polling; at least
// minSpin, at most maxSpin), then sleeps. When they do not, polling
// alone would hold a CPU a peer needs, so a waiter polls and yields its
// CPU between polls for yieldWakes times the wake-up (at least
// minYieldSpin, at most maxYieldSpin), so that a peer waiting for the CPU
// runs at once, and sleeps after; but if even the fastest yield timed at
// Listen took a time slice (yieldSlow), some outside process holds the
// CPUs and it sleeps at once. (The yield time is not compared with the
// wake-up: where the ranks outnumber the CPUs a yield hands the CPU to a
// peer, and what it costs is mostly that peer's turn, 25 to 45 µs each on
// the 2-vCPU guest with four ranks.) The yield gate (yield.go) still
// stops yielding while outside load makes yields slow. Options.Spin, when set, overrides the polling time.
//
// A receiver's sleeps on its ring first go through a raw system call,
// keeping the thread's P, for up to rawWakes wake-ups in all (at most
// maxRawSleep), so that a sleep ended by the expected message does not
// cost the runtime's P hand-off and the sysmon polling it sets off (see
// peer.sleepOnRing); a longer wait sleeps through the runtime.
//
// The choice is re-made as wake-ups are observed (every rechooseEvery),
// and Transport.Wait reports it with the figures it came from; with
// COHORT_SHM_WAIT_LOG=1 each choice is printed to standard error.
//
// COHORT_SHM_WAKE_DELAY=20us (any Go duration) adds that much to every
// futex sleep that is woken (the sleeper polls the clock before it goes
// on): a machine whose wake-ups are fast then behaves, and measures, as
// one whose wake-ups are slow, so that a developer sees there what the
// slow-waking machine does, and that the strategy adapts to it.
const (
	assumedWake   = 20 * time.Microsecond
	spinWakes     = 16
	minSpin       = 200 * time.Microsecond
	maxSpin       = 10 * time.Millisecond
	yieldWakes    = 10
	minYieldSpin  = 50 * time.Microsecond
	maxYieldSpin  = 2 * time.Millisecond
	rawWakes      = 8
	maxRawSleep   = 500 * time.Microsecond
	wakeSamples   = 8  // wake-ups seen before the estimate replaces assumedWake
	rechooseEvery = 64 // wake-ups between re-choices
)

// Costs are the figures a wait strategy is chosen from.
type Costs struct {
	// Wake is the mean time from a sender's futex wake to the sleeping
	// receiver running again; 0 when too few have been seen.
	Wake time.Duration
	// WakeSamples is how many wake-ups Wake is taken from.
	WakeSamples int64
	// Yield is the time of one sched_yield with nothing else to run (the
	// fastest of a few); 0 where unknown.
	Yield time.Duration
	// Ranks is how many ranks share memory (this one and its peers);
	// CPUs is how many CPUs they run on.
	Ranks, CPUs int
	// Injected is the wake-up delay added by COHORT_SHM_WAKE_DELAY (it
	// is part of Wake too).
	Injected time.Duration
}

// WaitPlan is how a waiter waits.
type WaitPlan struct {
	// Spin is how long a waiter polls before it sleeps on the futex.
	Spin time.Duration
	// Yield says a waiter yields its CPU (sched_yield) between polls.
	Yield bool
	// RawSleep is how long a wait may sleep without the Go runtime
	// knowing, keeping its P (see peer.sleepOnRing), before its sleeps
	// go through the runtime.
	RawSleep time.Duration
	// Why says which rule chose the plan.
	Why string
}

// chooseWait chooses how to wait from costs c (see the comment at the
// top). It is a pure function.
func chooseWait(c Costs) WaitPlan {
	wake := c.Wake
	if wake <= 0 || c.WakeSamples < wakeSamples {
		wake = assumedWake
	}
	raw := min(rawWakes*wake, maxRawSleep)
	if c.Ranks <= c.CPUs || c.CPUs <= 0 {
		return WaitPlan{Spin: clamp(spinWakes*wake, minSpin, maxSpin), RawSleep: raw,
			Why: fmt.Sprintf("%d ranks fit %d CPUs: poll %d wake-ups of %v", c.Ranks, c.CPUs, spinWakes, wake)}
	}
	if c.Yield > 0 && c.Yield < yieldSlow {
		return WaitPlan{Spin: clamp(yieldWakes*wake, minYieldSpin, maxYieldSpin), Yield: true, RawSleep: raw,
			Why: fmt.Sprintf("%d ranks on %d CPUs, a yield %v (under a time slice): poll and yield for %d wake-ups of %v", c.Ranks, c.CPUs, c.Yield, yieldWakes, wake)}
	}
	return WaitPlan{RawSleep: raw, Why: fmt.Sprintf("%d ranks on %d CPUs, a yield %v (unknown, or a time slice: outside load): sleep at once", c.Ranks, c.CPUs, c.Yield)}
}

// formatWait is one line about plan p, costs c and an Options.Spin that
// overrides p's.
func formatWait(p WaitPlan, c Costs, spin time.Duration) string {
	s := fmt.Sprintf("poll %v", p.Spin)
	if spin != 0 {
		s = fmt.Sprintf("poll %v (Options.Spin; the plan's: %v)", max(spin, 0), p.Spin)
	}
	if p.Yield {
		s += ", yielding the CPU between polls"
	}
	s += ", then sleep"
	if p.RawSleep > 0 {
		s += fmt.Sprintf(", unseen by the runtime for up to %v", p.RawSleep)
	}
	s += fmt.Sprintf(" (%s); wake-up %v from %d samples, yield %v", p.Why, c.Wake, c.WakeSamples, c.Yield)
	if c.Injected > 0 {
		s += fmt.Sprintf(", %v injected per wake-up (COHORT_SHM_WAKE_DELAY)", c.Injected)
	}
	return s
}

func clamp(d, lo, hi time.Duration) time.Duration { return max(lo, min(hi, d)) }

// wakeEstimate is an exponentially weighted mean of observed wake-ups
// (weight 1/8 for the newest), safe for concurrent use; racing updates may
// lose a sample.
type wakeEstimate struct {
	mean atomic.Int64 // ns
	n    atomic.Int64
}

// maxWakeSample bounds a sample: a longer gap is a sleep that outlived
// its wake-up for another reason (descheduled), not a wake-up.
const maxWakeSample = 5 * time.Millisecond

// add records one wake-up of d and reports the number of samples so far.
func (w *wakeEstimate) add(d time.Duration) int64 {
	if d <= 0 || d > maxWakeSample {
		return w.n.Load()
	}
	n := w.n.Add(1)
	if n == 1 {
		w.mean.Store(int64(d))
	} else {
		m := w.mean.Load()
		w.mean.Store(m + (int64(d)-m)/8)
	}
	return n
}

// get returns the mean and the number of samples.
func (w *wakeEstimate) get() (time.Duration, int64) {
	return time.Duration(w.mean.Load()), w.n.Load()
}
