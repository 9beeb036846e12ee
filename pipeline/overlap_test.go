package pipeline

import (
	"fmt"
	"testing"
	"time"

	"cohort/autograd"
	"cohort/dist"
	"cohort/dist/disttest"
	"cohort/tensor"
)

// sleepy is a stage whose passes take fixed times and no CPU: forward f,
// backward b (a whole backward; no split).
type sleepy struct {
	w     *autograd.Var
	shape []int
	last  bool
	f, b  time.Duration
}

func (s *sleepy) Parameters() []*autograd.Var { return []*autograd.Var{s.w} }

func (s *sleepy) Forward(mb int, in *autograd.Var) (*autograd.Var, error) {
	time.Sleep(s.f)
	inputs := []*autograd.Var{s.w}
	if in != nil {
		inputs = append(inputs, in)
	}
	val := tensor.New(s.shape...)
	if s.last {
		val = tensor.Full(1)
	}
	return autograd.Record("sleepy", val, inputs, func(g *tensor.Tensor) []*tensor.Tensor {
		time.Sleep(s.b)
		gs := []*tensor.Tensor{tensor.New(s.w.Value.Shape()...)}
		if in != nil {
			gs = append(gs, tensor.New(in.Value.Shape()...))
		}
		return gs
	}), nil
}

// With passes that cost known times, a step takes what the simulator
// says for those costs: the executor adds no serialisation of its own
// (sends and receives run beside compute). The passes sleep, so the
// check holds on a busy machine; it is skipped with -short.
func TestStepTimeMatchesSimulator(t *testing.T) {
	if testing.Short() {
		t.Skip("timing test")
	}
	const unit = 15 * time.Millisecond
	for _, c := range []struct {
		name string
		m    int
	}{{"gpipe", 8}, {"1f1b", 8}, {"1f1b", 4}, {"interleaved", 4}} {
		t.Run(fmt.Sprintf("%s/m=%d", c.name, c.m), func(t *testing.T) {
			s, err := NewSchedule(c.name, 2, 0, c.m)
			if err != nil {
				t.Fatal(err)
			}
			sim, err := Simulate(s, Costs{F: 1, B: 1, W: 1})
			if err != nil {
				t.Fatal(err)
			}
			want := time.Duration(sim.Makespan * float64(unit))
			shape := []int{2, 4}
			walls := make([]time.Duration, 2)
			disttest.Run(t, 2, func(t *testing.T, pg dist.ProcessGroup) {
				ctx := disttest.Context(t, time.Minute)
				var stages []Stage
				for ch := range s.Virtual {
					st := ch*s.Stages + pg.Rank()
					stages = append(stages, &sleepy{w: autograd.NewVar(tensor.New(3), true), shape: shape,
						last: st == s.NumStages()-1, f: unit, b: 2 * unit})
				}
				pl, err := New(ctx, pg, s, stages, Options{Shape: shape})
				if err != nil {
					t.Fatal(err)
				}
				defer pl.Close()
				best := time.Duration(1 << 62)
				for range 3 {
					before := pl.Stats()
					if _, err := pl.Step(ctx); err != nil {
						t.Fatal(err)
					}
					best = min(best, pl.Stats().Sub(before).Wall)
				}
				walls[pg.Rank()] = best
			})
			got := max(walls[0], walls[1])
			t.Logf("step %v, simulated %v (%.2f×)", got, want, float64(got)/float64(want))
			if got < want*95/100 || got > want*13/10 {
				t.Errorf("step took %v, the simulator says %v for these costs", got, want)
			}
		})
	}
}
