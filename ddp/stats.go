package ddp

import (
	"fmt"
	"time"
)

// Stats accumulates where the time of the Model's steps went, on this
// rank. Durations are wall-clock totals over the steps counted.
type Stats struct {
	Steps      int64 // synchronised steps
	LocalSteps int64 // steps under NoSync (forward and backward only)

	Forward    time.Duration // in the module's forward pass
	Backward   time.Duration // in autograd's backward pass, hooks included
	BufferSync time.Duration // broadcasting buffers before forward

	// Comm is the gradient communication time: per step, from the start of
	// the first bucket's reduction to the completion of the last one.
	Comm time.Duration
	// Hidden is the part of Comm that overlapped the backward pass.
	Hidden time.Duration
	// Exposed is the time Backward spent after autograd returned: waiting
	// for reductions that outlasted the backward pass, finishing them
	// (decompression, averaging) and copying gradients back.
	Exposed time.Duration

	// Bytes counts the float32 gradient bytes reduced (before compression).
	Bytes int64
}

// Compute returns the forward plus backward time.
func (s Stats) Compute() time.Duration { return s.Forward + s.Backward }

// HiddenFraction returns Hidden/Comm: 1 when all communication ran behind
// backward, 0 when none did (or there was none).
func (s Stats) HiddenFraction() float64 {
	if s.Comm <= 0 {
		return 0
	}
	return float64(s.Hidden) / float64(s.Comm)
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
// when its last reduction finished. Bucket completion stamps come from
// polls during backward, so Comm may overstate a reduction that finished
// inside backward by up to one parameter's backward computation.
func (m *Model) recordStep(end time.Time) {
	s := &m.stats
	s.Steps++
	s.Forward += m.cur.forward
	s.Backward += m.cur.backward
	s.BufferSync += m.cur.buffers
	s.Exposed += end.Sub(m.cur.backwardEnd)
	if len(m.buckets) == 0 {
		return
	}
	first, last := m.red.Times(0)
	for k, bs := range m.buckets {
		launched, done := m.red.Times(k)
		if launched.Before(first) {
			first = launched
		}
		if done.After(last) {
			last = done
		}
		s.Bytes += bs.paramBytes
	}
	s.Comm += last.Sub(first)
	hiddenEnd := last
	if m.cur.backwardEnd.Before(hiddenEnd) {
		hiddenEnd = m.cur.backwardEnd
	}
	if h := hiddenEnd.Sub(first); h > 0 {
		s.Hidden += h
	}
}

// String summarises the statistics on one line: compute per forward and
// backward pass (local ones included), communication per synchronised
// step.
func (s Stats) String() string {
	n, all := max(s.Steps, 1), max(s.Steps+s.LocalSteps, 1)
	per := func(d time.Duration, k int64) time.Duration { return (d / time.Duration(k)).Round(time.Microsecond) }
	return fmt.Sprintf("%d steps (+%d local): forward %v, backward %v per pass; buffers %v, communication %v (%.0f%% hidden), exposed %v, %d bytes reduced per step",
		s.Steps, s.LocalSteps, per(s.Forward, all), per(s.Backward, all), per(s.BufferSync, n), per(s.Comm, n), 100*s.HiddenFraction(), per(s.Exposed, n), s.Bytes/n)
}
