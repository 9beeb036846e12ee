package shm

import (
	"sync/atomic"
	"time"
)

// When the ranks sharing memory outnumber the CPUs, a waiting rank polls
// its ring and yields its CPU (sched_yield) between polls, so that a rank
// it waits for on the same CPU runs at once: four ranks on two cores then
// finish a 4 KiB all-reduce in about half the time they take sleeping on
// the futex at once (a futex wake-up, and the Go runtime taking the P back
// from the sleeping thread, cost more than a yield that lands on a peer).
//
// A yield helps only while the CPU goes to a peer, though. When another
// busy process shares the CPU, the kernel hands it that process's whole
// time slice instead (measured: with two CPU hogs beside the four ranks, a
// 4 KiB all-reduce took 5 to 8 ms yielding and 0.2 ms sleeping). So each
// yield of a waiter for a small message is timed (the peers of one moving
// long messages hold their CPUs for whole slices copying, which proves
// nothing about outside load), and one that took longer than yieldSlow turns yielding
// off for a while (the waiters sleep at once, as a rank whose peers fit
// the CPUs does after its spin): yieldBackoffMin at first, doubling while
// slow yields keep coming at the end of each pause, up to yieldBackoffMax,
// and from yieldBackoffMin again once they have stopped for longer than
// twice the pause. Under steady outside load the probing thus costs one
// slice every few seconds; without it, yielding stays on.
const (
	yieldSlow       = 500 * time.Microsecond
	yieldBackoffMin = 10 * time.Millisecond
	yieldBackoffMax = 4 * time.Second
)

// yieldGate says whether waiters may yield their CPU now. The zero value
// is open. It is safe for concurrent use; racing updates may lose one
// observation, which only shifts the next pause.
type yieldGate struct {
	closedUntil atomic.Int64 // ns on the caller's clock; waiters sleep before it
	backoff     atomic.Int64 // the last pause, ns; 0 before the first
	lastSlow    atomic.Int64 // when the last slow yield ended, ns
}

// open reports whether a waiter may yield at now.
func (g *yieldGate) open(now int64) bool { return now >= g.closedUntil.Load() }

// observe records a yield that ended at now after took.
func (g *yieldGate) observe(now int64, took time.Duration) {
	if took < yieldSlow {
		return
	}
	b := g.backoff.Load()
	switch {
	case b == 0 || now-g.lastSlow.Load() > 2*b:
		b = int64(yieldBackoffMin)
	default:
		b = min(2*b, int64(yieldBackoffMax))
	}
	g.backoff.Store(b)
	g.lastSlow.Store(now)
	g.closedUntil.Store(now + b)
}

// bigWait is the message length from which a waiter's slow yields are not
// evidence of outside load (see observeWait).
const bigWait = 256 << 10

// observeWait records a yield of a waiter for a message of n bytes: only
// one for a message shorter than bigWait counts (see the comment at the
// top).
func (g *yieldGate) observeWait(now int64, took time.Duration, n uint64) {
	if n < bigWait {
		g.observe(now, took)
	}
}
