//go:build linux

package shm

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cohortml/cohort/distributed/transport"
	"github.com/cohortml/cohort/distributed/transport/transporttest"
)

// TestYieldGate runs the gate through a transcript: each line is a yield
// (when it ended and how long it took) and the gate's answer right after
// and a moment before the pause it started ends.
func TestYieldGate(t *testing.T) {
	ms := int64(time.Millisecond)
	var g yieldGate
	var got strings.Builder
	step := func(at int64, took time.Duration, n uint64) {
		g.observeWait(at, took, n)
		until := g.closedUntil.Load()
		fmt.Fprintf(&got, "yield %v at %dms waiting for %d KiB: open %v", took, at/ms, n>>10, g.open(at))
		if until > at {
			fmt.Fprintf(&got, ", closed for %dms, open 1ns before %v, at the end %v", (until-at)/ms, g.open(until-1), g.open(until))
		}
		got.WriteString("\n")
	}
	const small, big = 4 << 10, bigWait
	step(0, 3*time.Microsecond, small)       // lands on a peer: stays open
	step(1*ms, 400*time.Microsecond, small)  // a peer's long reduction: still open
	step(1*ms, 6*time.Millisecond, big)      // a peer copying a long message for a whole slice: still open
	step(2*ms, 4*time.Millisecond, small)    // another tenant's slice: closed 10 ms
	step(12*ms, 3*time.Millisecond, small)   // probing at the end of the pause: 20 ms
	step(32*ms, 3*time.Millisecond, small)   // 40 ms
	step(72*ms, 5*time.Microsecond, small)   // a fast one changes nothing
	step(73*ms, 3*time.Millisecond, small)   // soon after the pause: 80 ms
	step(5000*ms, 3*time.Millisecond, small) // long after (more than twice 80 ms): 10 ms again
	want := `yield 3µs at 0ms waiting for 4 KiB: open true
yield 400µs at 1ms waiting for 4 KiB: open true
yield 6ms at 1ms waiting for 256 KiB: open true
yield 4ms at 2ms waiting for 4 KiB: open false, closed for 10ms, open 1ns before false, at the end true
yield 3ms at 12ms waiting for 4 KiB: open false, closed for 20ms, open 1ns before false, at the end true
yield 3ms at 32ms waiting for 4 KiB: open false, closed for 40ms, open 1ns before false, at the end true
yield 5µs at 72ms waiting for 4 KiB: open true
yield 3ms at 73ms waiting for 4 KiB: open false, closed for 80ms, open 1ns before false, at the end true
yield 3ms at 5000ms waiting for 4 KiB: open false, closed for 10ms, open 1ns before false, at the end true
`
	if got.String() != want {
		t.Errorf("transcript:\n%s\nwant:\n%s", got.String(), want)
	}
	for range 20 {
		g.observe(g.closedUntil.Load(), time.Second)
	}
	if b := time.Duration(g.backoff.Load()); b != yieldBackoffMax {
		t.Errorf("backoff after 20 slow probes = %v, want the cap %v", b, yieldBackoffMax)
	}
}

// TestConformanceYielding runs the suite with the waiters yielding the
// CPU between polls, as they do when the ranks outnumber the CPUs,
// whatever this machine's CPU count.
func TestConformanceYielding(t *testing.T) {
	newYieldingWorld := worldWith(func(o *Options) { o.CPUs = 1 }, func(_ int, tr *Transport) error {
		p, c := tr.Wait()
		if !tr.opts.yield || c.Ranks <= c.CPUs {
			return fmt.Errorf("yield %v, %d ranks on %d CPUs, want more ranks than CPUs", tr.opts.yield, c.Ranks, c.CPUs)
		}
		if want := c.Yield < yieldSlow; p.Yield != want {
			return fmt.Errorf("plan %+v from %+v: yield %v, want %v", p, c, p.Yield, want)
		}
		return nil
	})
	transporttest.Run(t, newYieldingWorld, transporttest.Config{Worlds: []int{2, 4}})
}

type hint bool

func (h hint) Waited() bool { return bool(h) }

// TestPollingOnlyForWaiters: a waiter polls until its spin ends, while the
// yield gate is open, and only for an operation someone waits for.
func TestPollingOnlyForWaiters(t *testing.T) {
	tr := &Transport{epoch: time.Now()}
	now := time.Now()
	later := now.Add(time.Second)
	bg := context.Background()
	for _, c := range []struct {
		name  string
		yield bool
		ctx   context.Context
		until time.Time
		want  bool
	}{
		{"no hint", false, bg, later, true},
		{"spin over", false, bg, now, false},
		{"waited", false, transport.WithWaitHint(bg, hint(true)), later, true},
		{"posted ahead", false, transport.WithWaitHint(bg, hint(false)), later, false},
		{"yielding, gate open", true, bg, later, true},
		{"yielding, posted ahead", true, transport.WithWaitHint(bg, hint(false)), later, false},
	} {
		tr.opts.yield = c.yield
		if got := tr.polling(c.ctx, now, c.until); got != c.want {
			t.Errorf("%s: polling %v, want %v", c.name, got, c.want)
		}
	}
	tr.opts.yield = true
	tr.gate.observe(tr.mono(), time.Second)
	if tr.polling(bg, now, later) {
		t.Error("yielding with the gate closed: polling")
	}
}
