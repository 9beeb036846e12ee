package warmheap

import "os"

// LoopSteps is how many steps a Loop measures, after the first, before it
// fits the heap.
const LoopSteps = 3

// Loop is Fit for a training loop without a warm-up of its own: call Step
// after every step. It begins measuring after the first step (whose
// allocations stay live), fits after LoopSteps more, once, and then does
// nothing. The collector is the user's where GOGC or GOMEMLIMIT is set
// (Options.Keep), and there is no Loop (NewLoop returns nil) where
// COHORT_FIT_HEAP=0. A nil *Loop does nothing.
type Loop struct {
	w     *Warmup
	steps int
	opts  Options
	done  bool
}

// NewLoop returns a Loop that fits with o; Keep is set for it when GOGC
// or GOMEMLIMIT is in the environment; nil where COHORT_FIT_HEAP is 0.
func NewLoop(o Options) *Loop {
	if os.Getenv("COHORT_FIT_HEAP") == "0" {
		return nil
	}
	o.Keep = o.Keep || UserCollector()
	return &Loop{opts: o}
}

// UserCollector reports whether the user set the collector's goal (GOGC
// or GOMEMLIMIT in the environment): Options.Keep then.
func UserCollector() bool { return os.Getenv("GOGC") != "" || os.Getenv("GOMEMLIMIT") != "" }

// Step follows a step. On the step that fits it returns Fit's decision and
// true; otherwise false.
func (l *Loop) Step() (Decision, bool) {
	if l == nil || l.done {
		return Decision{}, false
	}
	l.steps++
	switch {
	case l.steps == 1:
		l.w = Begin()
		return Decision{}, false
	case l.steps <= LoopSteps:
		l.w.Step()
		return Decision{}, false
	}
	l.w.Step()
	l.done = true
	return l.w.Fit(l.opts), true
}

// Finish fits now, at the end of a warm-up shorter than the Loop's
// measurement, if it has not fitted and measured at least one step after
// the first; it returns what Step would.
func (l *Loop) Finish() (Decision, bool) {
	if l == nil || l.done || l.steps < 2 {
		return Decision{}, false
	}
	l.done = true
	return l.w.Fit(l.opts), true
}
