package pipeline

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
)

// TestScheduleGoldens renders schedules as text, each rank's actions in
// order, then the simulated timing at unit costs and with communication,
// and compares them with the datadriven transcripts in testdata/schedules
// (go test -rewrite rewrites them; review the diff):
//
//	schedule name=NAME stages=N virtual=N microbatches=N
func TestScheduleGoldens(t *testing.T) {
	datadriven.Walk(t, filepath.Join("testdata", "schedules"), func(t *testing.T, path string) {
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			if d.Cmd != "schedule" {
				d.Fatalf(t, "unknown command %q (want schedule)", d.Cmd)
			}
			var name string
			var stages, virtual, microbs int
			d.ScanArgs(t, "name", &name)
			d.ScanArgs(t, "stages", &stages)
			d.ScanArgs(t, "virtual", &virtual)
			d.ScanArgs(t, "microbatches", &microbs)
			s, err := NewSchedule(name, stages, virtual, microbs)
			if err != nil {
				d.Fatalf(t, "%v", err)
			}
			var b strings.Builder
			b.WriteString(s.String())
			for _, costs := range []Costs{UnitCosts(), {F: 1, B: 1, W: 1, Comm: 0.25}} {
				res, err := Simulate(s, costs)
				if err != nil {
					d.Fatalf(t, "%v", err)
				}
				fmt.Fprintf(&b, "costs F=%g B=%g W=%g comm=%g: makespan %g bubble %.4f idle %g peak %v\n",
					costs.F, costs.B, costs.W, costs.Comm, res.Makespan, res.Bubble, res.Idle, res.Peak)
			}
			return b.String()
		})
	})
}

// The simulator rejects wrong schedules, naming the rank and action.
func TestSimulateRejects(t *testing.T) {
	f := func(st, mb int) Action { return compute(Forward, st, mb) }
	b := func(st, mb int) Action { return compute(Backward, st, mb) }
	sa := func(st, mb, to int) Action { return Action{Kind: SendAct, Stage: st, Microbatch: mb, Peer: to} }
	ra := func(st, mb, from int) Action { return Action{Kind: RecvAct, Stage: st, Microbatch: mb, Peer: from} }
	sg := func(st, mb, to int) Action { return Action{Kind: SendGrad, Stage: st, Microbatch: mb, Peer: to} }
	rg := func(st, mb, from int) Action { return Action{Kind: RecvGrad, Stage: st, Microbatch: mb, Peer: from} }
	cases := []struct {
		name  string
		ranks [][]Action
		want  string
	}{
		{"deadlock", [][]Action{
			{rg(0, 0, 1), f(0, 0), sa(0, 0, 1), b(0, 0)},
			{ra(1, 0, 0), f(1, 0), b(1, 0), sg(1, 0, 0)},
		}, "deadlock: rank 0 at action 0 (recvG0<1/s0), rank 1 at action 0 (recvA0<0/s1)"},
		{"order", [][]Action{
			{f(0, 0), sa(0, 0, 1), f(0, 1), sa(0, 1, 1), rg(0, 0, 1), b(0, 0), rg(0, 1, 1), b(0, 1)},
			{ra(1, 1, 0), f(1, 1), ra(1, 0, 0), f(1, 0), b(1, 0), sg(1, 0, 0), b(1, 1), sg(1, 1, 0)},
		}, "next message from rank 0 is stage 0 microbatch 0, want stage 0 microbatch 1"},
		{"twice", [][]Action{
			{f(0, 0), f(0, 0)},
			{},
		}, "computed twice"},
		{"missing", [][]Action{
			{f(0, 0), sa(0, 0, 1), rg(0, 0, 1), b(0, 0)},
			{ra(1, 0, 0), f(1, 0), b(1, 0), sg(1, 0, 0)},
		}, "stage 0 microbatch 1 is not computed"},
		{"unreceived", [][]Action{
			{f(0, 0), sa(0, 0, 1), sa(0, 0, 1), rg(0, 0, 1), b(0, 0)},
			{ra(1, 0, 0), f(1, 0), b(1, 0), sg(1, 0, 0)},
		}, "never received"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := 1
			if c.name == "order" || c.name == "missing" {
				m = 2
			}
			s := &Schedule{Name: "test", Stages: 2, Virtual: 1, Microbatches: m, Ranks: c.ranks}
			_, err := Simulate(s, UnitCosts())
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("got %v, want an error containing %q", err, c.want)
			}
		})
	}
}
