package plan_test

import (
	"math"
	"testing"

	"github.com/cohortml/cohort/pipeline"
	"github.com/cohortml/cohort/plan"
)

// TestMakespanAgainstSimulator checks the analytic pipeline time and
// activations in flight against pipeline.Simulate (which plan itself
// cannot import: package pipeline depends on distributed) over stages
// 2–8, microbatches 1–16 and three cost mixes, with and without
// communication delay. The worst errors (1F1B −3.3%, ZB-H1 −5.0%) come
// from the communication delays: ZB-H1's are charged on the fill and
// drain only, 1F1B's also on its steady state's round trips.
func TestMakespanAgainstSimulator(t *testing.T) {
	worst := map[string]float64{}
	for _, name := range []string{"gpipe", "1f1b", "interleaved", "zb"} {
		for p := 2; p <= 8; p++ {
			for m := 1; m <= 16; m++ {
				vs := []int{1}
				if name == "interleaved" {
					if m%p != 0 {
						continue
					}
					vs = []int{2, 3}
				}
				for _, v := range vs {
					s, err := pipeline.NewSchedule(name, p, v, m)
					if err != nil {
						t.Fatal(err)
					}
					for _, c := range []pipeline.Costs{{F: 1, B: 1, W: 1}, {F: 1, B: 1.2, W: 0.8, Comm: 0.05}, {F: 1, B: 2, W: 1, Comm: 0.2}} {
						res, err := pipeline.Simulate(s, c)
						if err != nil {
							t.Fatal(err)
						}
						ranks := make([]plan.StageCost, p)
						for i := range ranks {
							// one rank's v chunks, each costing c
							ranks[i] = plan.StageCost{F: float64(v) * c.F, B: float64(v) * c.B, W: float64(v) * c.W}
						}
						got := plan.Makespan(name, v, m, ranks, c.Comm)
						rel := (got - res.Makespan) / res.Makespan
						if math.Abs(rel) > math.Abs(worst[name]) {
							worst[name] = rel
						}
						l := plan.Layout{PP: p, Virtual: v, Microbatches: m, Schedule: name}
						for r := range p {
							if got := plan.InFlight(l, r); got != res.Peak[r] {
								t.Errorf("%s p=%d v=%d m=%d rank %d: %d microbatch-chunks in flight, the simulator holds %d", name, p, v, m, r, got, res.Peak[r])
							}
						}
					}
				}
			}
		}
	}
	for _, name := range []string{"gpipe", "1f1b", "interleaved", "zb"} {
		t.Logf("%-11s worst makespan error %+.1f%%", name, 100*worst[name])
		if math.Abs(worst[name]) > 0.06 {
			t.Errorf("%s: makespan off the simulator's by %+.1f%%", name, 100*worst[name])
		}
	}
}
