package pipeline

import (
	"fmt"
	"math"
	"slices"
	"testing"
)

type gridCase struct {
	name            string
	stages, virtual int
	microbatches    int
}

// grid lists every schedule configuration the simulator must accept:
// stages 1–8 × microbatches 1–16, and virtual stages 1–4 for interleaved
// (whose microbatches must be a multiple of the stages).
func grid() []gridCase {
	var out []gridCase
	for _, name := range Names() {
		for p := 1; p <= 8; p++ {
			for m := 1; m <= 16; m++ {
				vs := []int{1}
				if name == "interleaved" {
					if m%p != 0 {
						continue
					}
					vs = []int{1, 2, 3, 4}
				}
				for _, v := range vs {
					out = append(out, gridCase{name, p, v, m})
				}
			}
		}
	}
	return out
}

func TestSimulateGrid(t *testing.T) {
	for _, g := range grid() {
		t.Run(fmt.Sprintf("%s/p=%d/v=%d/m=%d", g.name, g.stages, g.virtual, g.microbatches), func(t *testing.T) {
			s, err := NewSchedule(g.name, g.stages, g.virtual, g.microbatches)
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range []Costs{UnitCosts(), {F: 1, B: 2, W: 1, Comm: 0.1}, {F: 1, B: 1, W: 2, Comm: 0.5}} {
				res, err := Simulate(s, c)
				if err != nil {
					t.Fatalf("costs %+v: %v", c, err)
				}
				if res.Bubble < -1e-9 || res.Bubble >= 1 {
					t.Errorf("costs %+v: bubble %v", c, res.Bubble)
				}
			}
			res, err := Simulate(s, UnitCosts())
			if err != nil {
				t.Fatal(err)
			}
			p, m := g.stages, g.microbatches
			switch g.name {
			case "gpipe", "1f1b":
				if want := IdealBubble(p, 1, m); math.Abs(res.Bubble-want) > 1e-9 {
					t.Errorf("bubble %v, want (p−1)/(m+p−1) = %v", res.Bubble, want)
				}
			case "interleaved":
				if want := IdealBubble(p, g.virtual, m); res.Bubble > want+1e-9 {
					t.Errorf("bubble %v, want at most (p−1)/(vm+p−1) = %v", res.Bubble, want)
				}
			}
			switch g.name {
			case "gpipe":
				if res.PeakMax() != m {
					t.Errorf("peak activations %v, want %d", res.Peak, m)
				}
			case "1f1b", "zb":
				if res.PeakMax() > min(p, m) {
					t.Errorf("peak activations %v, want at most min(p, m) = %d", res.Peak, min(p, m))
				}
			}
		})
	}
}

// ZB-H1 against 1F1B at unit costs: the same peak activation memory and
// about a third of the idle time ((p−1)(F+B−W) against (p−1)(F+B+W)).
func TestZBH1Bubble(t *testing.T) {
	for p := 2; p <= 8; p++ {
		for _, m := range []int{p, 2 * p, 16} {
			t.Run(fmt.Sprintf("p=%d/m=%d", p, m), func(t *testing.T) {
				f, _ := NewSchedule("1f1b", p, 1, m)
				z, _ := NewSchedule("zb", p, 1, m)
				rf, err := Simulate(f, UnitCosts())
				if err != nil {
					t.Fatal(err)
				}
				rz, err := Simulate(z, UnitCosts())
				if err != nil {
					t.Fatal(err)
				}
				t.Logf("1f1b idle %v bubble %.3f peak %v; zb idle %v bubble %.3f peak %v", rf.Idle, rf.Bubble, rf.Peak, rz.Idle, rz.Bubble, rz.Peak)
				if rz.PeakMax() > rf.PeakMax() {
					t.Errorf("zb peak %v above 1f1b's %v", rz.Peak, rf.Peak)
				}
				if want := 3 * float64(p-1); math.Abs(rf.Idle-want) > 1e-9 {
					t.Errorf("1f1b idle %v, want (p−1)(F+B+W) = %v", rf.Idle, want)
				}
				if want := float64(p - 1); rz.Idle > want+1e-9 {
					t.Errorf("zb idle %v, want at most (p−1)(F+B−W) = %v, a third of 1f1b's %v", rz.Idle, want, rf.Idle)
				}
			})
		}
	}
}

// Per-rank costs: with 1F1B on 2 stages where stage 1 costs twice as much,
// the step is stage 0's first forward, m whole microbatches on stage 1,
// then stage 0's last backward.
func TestSimulateRankCosts(t *testing.T) {
	for _, m := range []int{2, 4, 8} {
		s, err := NewSchedule("1f1b", 2, 1, m)
		if err != nil {
			t.Fatal(err)
		}
		c := Costs{Ranks: []Costs{{F: 1, B: 1, W: 1}, {F: 2, B: 2, W: 2}}}
		r, err := Simulate(s, c)
		if err != nil {
			t.Fatal(err)
		}
		if want := 1 + 6*float64(m) + 2; r.Makespan != want {
			t.Errorf("m=%d: makespan %v, want %v", m, r.Makespan, want)
		}
		if r.Busy[0] != 3*float64(m) || r.Busy[1] != 6*float64(m) {
			t.Errorf("m=%d: busy %v, want [%d %d]", m, r.Busy, 3*m, 6*m)
		}
	}
}

// ZB-H1 runs a weight pass right after its input pass wherever deferring
// it gains nothing: against the plan that keeps rank r's r weight passes
// pending all step, the simulator finds the same step time and peak memory,
// at unit costs, with a costly input pass, with communication delays and
// with stages of unequal cost; and only weight passes after a rank's last
// forward are deferred.
func TestZBH1HoistedWeights(t *testing.T) {
	costs := []Costs{
		UnitCosts(),
		{F: 2.6, B: 3.0, W: 2.0},
		{F: 1, B: 2, W: 0.5, Comm: 0.3},
		{F: 1, B: 1, W: 2},
		{Ranks: []Costs{{F: 2.4, B: 2.8, W: 1.9}, {F: 2.6, B: 3.1, W: 2.0}, {F: 1.3, B: 1.5, W: 1.0}, {F: 2.8, B: 3.3, W: 2.1}, {F: 2, B: 2, W: 2}, {F: 3, B: 1, W: 1}}},
	}
	for p := 2; p <= 6; p++ {
		for _, m := range []int{1, p, 2*p + 1, 16} {
			hoisted, err := NewSchedule("zb", p, 1, m)
			if err != nil {
				t.Fatal(err)
			}
			deferred := &Schedule{Name: "zb", Stages: p, Virtual: 1, Microbatches: m}
			deferred.Ranks = deferred.withComms(zbh1Deferred(p, m))
			for ci, c := range costs {
				if c.Ranks != nil {
					c.Ranks = c.Ranks[:p]
				}
				rh, err := Simulate(hoisted, c)
				if err != nil {
					t.Fatalf("p=%d m=%d: %v", p, m, err)
				}
				rd, err := Simulate(deferred, c)
				if err != nil {
					t.Fatalf("p=%d m=%d: deferred plan: %v", p, m, err)
				}
				if math.Abs(rh.Makespan-rd.Makespan) > 1e-9 || !slices.Equal(rh.Peak, rd.Peak) {
					t.Errorf("p=%d m=%d costs %d: hoisted step %v peak %v, deferred step %v peak %v", p, m, ci, rh.Makespan, rh.Peak, rd.Makespan, rd.Peak)
				}
			}
			for r, acts := range hoisted.Ranks {
				lastF := -1
				for i, a := range acts {
					if a.Kind == Forward {
						lastF = i
					}
				}
				for i, a := range acts {
					if a.Kind == BackwardWeight && i < lastF && (i == 0 || acts[i-1].Kind != BackwardInput && acts[i-1].Kind != SendGrad) {
						t.Errorf("p=%d m=%d rank %d: W%d at %d before the last forward, not right after its input pass", p, m, r, a.Microbatch, i)
					}
				}
			}
		}
	}
}
