package bench

import (
	"time"

	"github.com/cohortml/cohort/internal/warmheap"
)

// firstSteps is how many timed steps the report's first-steps figure
// covers: a step slowed by fresh memory shows there, not in the total of
// a long run.
const firstSteps = 100

// warm is a training loop's heap handling around its warm-up: the
// measurement warmheap.Fit works from (begun after the first warm-up
// step, whose allocations stay live) and the fault tax of
// COHORT_PAGE_FAULT_COST.
type warm struct {
	w         *warmheap.Warmup
	tax       *warmheap.Tax // nil: no tax
	taxBefore time.Duration // paid before the timed steps
	faults    int64         // minor faults before the timed steps
}

func newWarm(s trainSpec) *warm {
	w := &warm{}
	if s.faultCost > 0 {
		w.tax = warmheap.NewTax(s.faultCost)
	}
	return w
}

// step follows warm-up step i (from 0).
func (w *warm) step(i int) {
	w.tax.Pay()
	if i == 0 {
		w.w = warmheap.Begin()
		return
	}
	w.w.Step()
}

// fit runs warmheap.Fit after the warm-up when s asks for it (and the
// warm-up measured at least one step after the first), and describes it.
func (w *warm) fit(s trainSpec) string {
	if !s.fitHeap || w.w == nil {
		return ""
	}
	d := w.w.Fit(warmheap.Options{Keep: s.keepGC, ExtraFaultCost: s.faultCost})
	w.tax.Pay() // the faults of Fit's own touching are warm-up's
	return d.String()
}

// timed marks the start of the timed steps.
func (w *warm) timed() {
	w.tax.Pay()
	w.taxBefore = w.tax.Paid()
	w.faults = warmheap.MinorFaults()
}

// done records what the timed steps paid for fresh memory.
func (w *warm) done(r *trainResult) {
	r.TaxPaid = w.tax.Paid() - w.taxBefore
	r.Faults = warmheap.MinorFaults() - w.faults
}

// first records the time of the first firstSteps timed steps once step i
// (from 0) has run.
func (r *trainResult) first(i int, start time.Time) {
	if i < firstSteps {
		r.FirstSteps, r.First = i+1, time.Since(start)
	}
}

// firstRate is the rate of the first timed steps, for perStep items
// (samples or tokens) per step over the world.
func (r trainResult) firstRate(perStep int) float64 {
	if r.First <= 0 {
		return 0
	}
	return float64(perStep*r.FirstSteps) / r.First.Seconds()
}
