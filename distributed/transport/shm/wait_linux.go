package shm

import (
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// processCosts are the figures measured once per process (see wait.go).
var processCosts = sync.OnceValue(func() Costs {
	var c Costs
	if d, err := time.ParseDuration(os.Getenv("COHORT_SHM_WAKE_DELAY")); err == nil && d > 0 {
		c.Injected = d
	}
	c.Yield = measureYield()
	return c
})

// waitLog says whether each choice of wait plan is printed to standard
// error (COHORT_SHM_WAIT_LOG=1).
var waitLog = sync.OnceValue(func() bool { return os.Getenv("COHORT_SHM_WAIT_LOG") == "1" })

// measureYield times 32 sched_yields and returns the fastest: the cost
// of a yield that finds nothing else to run, which is what a waiter pays
// per poll while its peer is not runnable either. (Setup runs while other
// ranks start on the same CPUs, whose turns would otherwise count.)
func measureYield() time.Duration {
	best := time.Duration(1<<63 - 1)
	for range 32 {
		start := time.Now()
		schedYield()
		best = min(best, time.Since(start))
	}
	return best
}

// monoNow is CLOCK_MONOTONIC in nanoseconds, the same clock in every
// process of the host: a sender stamps the ring with it when it rings the
// futex, and the woken receiver subtracts.
func monoNow() int64 {
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}

// waitState is a chosen plan and the costs it was chosen from.
type waitState struct {
	plan  WaitPlan
	costs Costs
}

// chooseWaitNow (re)chooses the transport's wait plan from the costs
// known now.
func (t *Transport) chooseWaitNow() {
	c := processCosts()
	c.Ranks, c.CPUs = t.opts.ranks, t.opts.cpus
	c.Wake, c.WakeSamples = t.wakes.get()
	p := chooseWait(c)
	old := t.waiting.Swap(&waitState{plan: p, costs: c})
	if old != nil && old.plan.Spin == p.Spin && old.plan.Yield == p.Yield {
		return
	}
	t.opts.Logger.Debug("shm: wait plan", "rank", t.rank, "spin", p.Spin, "yield", p.Yield, "why", p.Why,
		"wake", c.Wake, "wake_samples", c.WakeSamples, "yield_cost", c.Yield, "injected", c.Injected)
	if waitLog() {
		fmt.Fprintf(os.Stderr, "shm: rank %d: wait plan: %s\n", t.rank, formatWait(p, c, t.opts.Spin))
	}
}

// Wait reports how this transport's waiters wait now, and the figures the
// choice came from (see wait.go).
func (t *Transport) Wait() (WaitPlan, Costs) {
	w := t.waiting.Load()
	p := w.plan
	if t.opts.Spin != 0 {
		p.Spin = max(t.opts.Spin, 0)
	}
	return p, w.costs
}

// plan returns the current wait plan.
func (t *Transport) plan() WaitPlan { return t.waiting.Load().plan }

// spin is how long a waiter polls before sleeping.
func (t *Transport) spin() time.Duration {
	if t.opts.Spin != 0 {
		return t.opts.Spin
	}
	return t.plan().Spin
}

// woke is called by a sleeper that a waker ended (not a timeout): the
// injected wake-up delay, if any, is spent polling the clock; and a wake-up
// whose waker stamped rangAt, no earlier than the sleep began at slept, is
// recorded.
func (t *Transport) woke(rangAt *int64, slept int64) {
	if d := processCosts().Injected; d > 0 {
		for end := monoNow() + int64(d); monoNow() < end; {
		}
	}
	if rangAt == nil {
		return
	}
	at := atomic.LoadInt64(rangAt)
	if at < slept {
		return // rung by someone who does not stamp (Close, a dead peer)
	}
	if n := t.wakes.add(time.Duration(monoNow() - at)); n == wakeSamples || n%rechooseEvery == 0 {
		t.chooseWaitNow()
	}
}
