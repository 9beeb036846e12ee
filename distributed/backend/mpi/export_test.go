package mpi

import (
	"testing"

	"github.com/cohortml/cohort/distributed"
)

// PollAllocs returns the allocations per poll of w's group while w is
// in flight (testing.AllocsPerRun over runs polls), or -1 when the MPI
// backend runs funneled (polling then belongs to the MPI goroutine).
func PollAllocs(w distributed.Work, runs int) float64 {
	o := w.(*mpiOp)
	if !o.g.p.direct {
		return -1
	}
	return testing.AllocsPerRun(runs, func() {
		o.g.pmu.Lock()
		o.g.progress()
		o.g.pmu.Unlock()
	})
}
