package ddp

import (
	"fmt"
	"time"
)

// Stats accumulates where the time of the Model's steps went, on this
// rank. Durations are wall-clock totals over the steps counted.
//
// Communication is reported as two separate quantities, because neither
// alone says what it costs: Busy is how long reductions were in flight,
// Exposed is how much of the step they (and the work around them)
// lengthened. Busy = Hidden + the busy time after autograd returned, and
// that remainder is at most Exposed.
type Stats struct {
	Steps      int64 // synchronised steps
	LocalSteps int64 // steps under NoSync (forward and backward only)

	Forward    time.Duration // in the module's forward pass
	Backward   time.Duration // in autograd's backward pass, hooks included
	BufferSync time.Duration // broadcasting buffers before forward

	// Busy is the gradient communication's busy time: per step, the length
	// of the union of the buckets' [launch, seen done] intervals, i.e. the
	// time at least one bucket's reduction was in flight. Gaps between
	// buckets (backward computing, nothing on the wire) are not counted.
	// A bucket is seen done when a gradient hook or the step's end polls
	// it, so a reduction that finished during backward may be overstated by
	// up to one parameter's backward computation. For a hook of several
	// stages (PowerSGD) a bucket is done when its first stage is; the later
	// stages run in Finish, after autograd returned, and count as Exposed.
	Busy time.Duration
	// Hidden is the part of Busy before autograd's backward pass returned:
	// communication that overlapped computation.
	Hidden time.Duration
	// Exposed is the communication time not hidden: the time Backward spent
	// after autograd returned, waiting for reductions that outlasted the
	// backward pass, finishing them (decompression, averaging) and copying
	// gradients back. It is what communication added to the step.
	Exposed time.Duration

	// Comm equals Busy.
	//
	// Deprecated: it was once the span from the first bucket's launch to
	// the last one's completion, which counted the gaps between buckets and
	// overstated both the time and the share hidden. Use Busy and Exposed.
	Comm time.Duration

	// Bytes counts the float32 gradient bytes reduced (before compression).
	Bytes int64
}

// Compute returns the forward plus backward time.
func (s Stats) Compute() time.Duration { return s.Forward + s.Backward }

// HiddenFraction returns Hidden/Busy: 1 when all communication ran behind
// backward, 0 when none did (or there was none).
func (s Stats) HiddenFraction() float64 {
	if s.Busy <= 0 {
		return 0
	}
	return float64(s.Hidden) / float64(s.Busy)
}

// stepTimes are the timings of the current step.
type stepTimes struct {
	forward, backward, buffers time.Duration
	backwardEnd                time.Time
}

// Stats returns the statistics accumulated since Wrap or ResetStats.
func (m *Model) Stats() Stats { return m.stats }

// ResetStats clears the statistics (e.g. after warm-up steps).
func (m *Model) ResetStats() { m.stats = Stats{} }

// recordStep adds a finished synchronised step to the statistics; end is
// when its last reduction finished and the gradients were copied out.
func (m *Model) recordStep(end time.Time) {
	s := &m.stats
	s.Steps++
	s.Forward += m.cur.forward
	s.Backward += m.cur.backward
	s.BufferSync += m.cur.buffers
	s.Exposed += end.Sub(m.cur.backwardEnd)
	iv := m.ivs[:0]
	for k, bs := range m.buckets {
		launched, done := m.red.Times(k)
		iv = append(iv, interval{launched, done})
		s.Bytes += bs.paramBytes
	}
	m.ivs = iv
	busy, hidden := busyTime(iv, m.cur.backwardEnd)
	s.Busy += busy
	s.Comm += busy
	s.Hidden += hidden
}

// interval is one bucket's reduction, from launch to seen done.
type interval struct{ begin, end time.Time }

// busyTime returns the length of the union of ivs (in launch order, as
// buckets are launched) and the part of it before cut.
func busyTime(ivs []interval, cut time.Time) (busy, before time.Duration) {
	var cur interval
	open := false
	flush := func() {
		if !open {
			return
		}
		busy += cur.end.Sub(cur.begin)
		if e := minTime(cur.end, cut); e.After(cur.begin) {
			before += e.Sub(cur.begin)
		}
	}
	for _, iv := range ivs {
		if iv.end.Before(iv.begin) {
			iv.end = iv.begin
		}
		if open && !iv.begin.After(cur.end) {
			if iv.end.After(cur.end) {
				cur.end = iv.end
			}
			continue
		}
		flush()
		cur, open = iv, true
	}
	flush()
	return busy, before
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// Communication summarises the gradient communication per synchronised
// step: busy time, the share of it behind backward, and the exposed time.
func (s Stats) Communication() string {
	per := func(d time.Duration) time.Duration {
		return (d / time.Duration(max(s.Steps, 1))).Round(time.Microsecond)
	}
	return fmt.Sprintf("gradient all-reduce busy %v per step (%.0f%% of it behind backward), exposed %v per step",
		per(s.Busy), 100*s.HiddenFraction(), per(s.Exposed))
}

// String summarises the statistics on one line: compute per forward and
// backward pass (local ones included), communication per synchronised
// step.
func (s Stats) String() string {
	n, all := max(s.Steps, 1), max(s.Steps+s.LocalSteps, 1)
	per := func(d time.Duration, k int64) time.Duration { return (d / time.Duration(k)).Round(time.Microsecond) }
	return fmt.Sprintf("%d steps (+%d local): forward %v, backward %v per pass; buffers %v, all-reduce busy %v (%.0f%% hidden behind backward), exposed %v, %d bytes reduced per step",
		s.Steps, s.LocalSteps, per(s.Forward, all), per(s.Backward, all), per(s.BufferSync, n), per(s.Busy, n), 100*s.HiddenFraction(), per(s.Exposed, n), s.Bytes/n)
}
