package obs

import (
	"time"

	"github.com/cohortml/cohort/obs/trace"
)

// StepTimer times one training step for Run.Step and traces it: span
// "step" on trace.Step for the whole step, "batch" on trace.Data while the
// batch loads. A loop calls StartStep, Loaded once the batch is there,
// and Done at the end; what it traces in between (the recipe's forward,
// backward and optimizer spans) goes through Run.Tracer.
type StepTimer struct {
	r            *Run
	start, ready time.Time
	step, data   trace.Span
}

// StartStep starts timing a step whose batch is being loaded. r may be nil
// (nothing is traced or reported; the times are still measured).
func (r *Run) StartStep() *StepTimer {
	t := &StepTimer{r: r, start: time.Now()}
	t.step = r.Tracer().Begin(trace.Step, "step")
	t.data = r.Tracer().Begin(trace.Data, "batch")
	return t
}

// Loaded marks the batch as loaded: the data wait ends.
func (t *StepTimer) Loaded() {
	t.data.End()
	t.ready = time.Now()
}

// Done ends the step and reports s to the run with its Duration and
// DataWait measured and Compute the rest (Duration − DataWait − s.Comm);
// it returns the report.
func (t *StepTimer) Done(s Step) Step {
	t.step.End()
	s.Duration, s.DataWait = time.Since(t.start), t.ready.Sub(t.start)
	s.Compute = s.Duration - s.DataWait - s.Comm
	t.r.Step(s)
	return s
}
