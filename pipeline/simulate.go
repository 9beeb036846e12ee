package pipeline

import (
	"fmt"
	"strings"
)

// Costs are the durations the simulator gives each action, in any unit.
// A whole Backward costs B+W; BackwardInput B and BackwardWeight W. Comm
// is the delay between a send and the earliest matching receive.
type Costs struct {
	F, B, W, Comm float64
	// Ranks, when set, gives each rank its own F, B and W (stages of
	// unequal cost, e.g. measured ones); Comm is taken from the top level.
	Ranks []Costs
}

// UnitCosts gives forward, input-gradient and weight-gradient passes one
// unit each (a whole backward two) and free communication.
func UnitCosts() Costs { return Costs{F: 1, B: 1, W: 1} }

// Result is what Simulate measured.
type Result struct {
	Makespan float64   // time at which the last rank finishes
	Busy     []float64 // compute time of each rank
	// Bubble is the idle fraction of the step, 1 − ΣBusy/(Stages·Makespan).
	Bubble float64
	// Idle is the largest idle time of one rank, Makespan − Busy[r].
	Idle float64
	// Peak is, per rank, the largest number of microbatch-stages whose
	// activations are held at once: from the forward pass until the whole
	// backward (for a split backward, the weight pass) is done.
	Peak []int
	// Start holds each action's start time, Start[r][i] for Ranks[r][i].
	Start [][]float64
}

// PeakMax returns the largest Peak over ranks.
func (r *Result) PeakMax() int {
	m := 0
	for _, p := range r.Peak {
		m = max(m, p)
	}
	return m
}

// Simulate runs the schedule symbolically under its semantics (see
// Schedule) and returns its timing, or an error when it is wrong: a
// deadlock (naming every blocked rank and what it waits for), a receive
// that would get another message than it expects, data used before it is
// produced, or a microbatch-stage computed twice or never.
func Simulate(s *Schedule, c Costs) (*Result, error) {
	if len(s.Ranks) != s.Stages {
		return nil, fmt.Errorf("pipeline: simulate %s: %d rank lists for %d stages", s.Name, len(s.Ranks), s.Stages)
	}
	type key struct{ kind, stage, mb int }
	type msg struct {
		stage, mb int
		at        float64
	}
	type link struct {
		from, to int
		grad     bool
	}
	nst := s.NumStages()
	done := map[key]float64{} // finish time of a compute action, by (kind, stage, mb)
	have := map[key]bool{}    // data received: (RecvAct|RecvGrad, stage, mb)
	queues := map[link][]msg{}
	pc := make([]int, s.Stages)
	clock := make([]float64, s.Stages)
	res := &Result{Busy: make([]float64, s.Stages), Peak: make([]int, s.Stages), Start: make([][]float64, s.Stages)}
	held := make([]int, s.Stages)
	for r := range res.Start {
		res.Start[r] = make([]float64, len(s.Ranks[r]))
	}
	fail := func(r int, a Action, format string, args ...any) error {
		return fmt.Errorf("pipeline: schedule %s: rank %d action %d (%v): %s", s.Name, r, pc[r], a, fmt.Sprintf(format, args...))
	}
	isDone := func(k Kind, st, mb int) bool { _, ok := done[key{int(k), st, mb}]; return ok }
	backwardDone := func(st, mb int) bool { return isDone(Backward, st, mb) || isDone(BackwardInput, st, mb) }

	// step tries to perform rank r's next action; it reports whether it did.
	step := func(r int) (bool, error) {
		c := c
		if r < len(c.Ranks) {
			c = Costs{F: c.Ranks[r].F, B: c.Ranks[r].B, W: c.Ranks[r].W, Comm: c.Comm}
		}
		a := s.Ranks[r][pc[r]]
		st, mb := a.Stage, a.Microbatch
		if st < 0 || st >= nst || s.RankOf(st) != r || mb < 0 || mb >= s.Microbatches {
			return false, fail(r, a, "stage %d microbatch %d is not this rank's", st, mb)
		}
		start := clock[r]
		cost := 0.0
		switch a.Kind {
		case Forward:
			switch {
			case isDone(Forward, st, mb):
				return false, fail(r, a, "computed twice")
			case st > 0 && s.RankOf(st-1) == r && !isDone(Forward, st-1, mb):
				return false, fail(r, a, "input from stage %d not computed yet", st-1)
			case st > 0 && s.RankOf(st-1) != r && !have[key{int(RecvAct), st, mb}]:
				return false, fail(r, a, "input activation not received")
			}
			cost = c.F
			held[r]++
			res.Peak[r] = max(res.Peak[r], held[r])
		case Backward, BackwardInput:
			switch {
			case backwardDone(st, mb):
				return false, fail(r, a, "backward computed twice")
			case !isDone(Forward, st, mb):
				return false, fail(r, a, "backward before forward")
			case st < nst-1 && s.RankOf(st+1) == r && !backwardDone(st+1, mb):
				return false, fail(r, a, "output gradient from stage %d not computed yet", st+1)
			case st < nst-1 && s.RankOf(st+1) != r && !have[key{int(RecvGrad), st, mb}]:
				return false, fail(r, a, "output gradient not received")
			}
			if a.Kind == Backward {
				cost = c.B + c.W
				held[r]--
			} else {
				cost = c.B
			}
		case BackwardWeight:
			switch {
			case isDone(BackwardWeight, st, mb):
				return false, fail(r, a, "computed twice")
			case !isDone(BackwardInput, st, mb):
				return false, fail(r, a, "weight pass before input pass")
			}
			cost = c.W
			held[r]--
		case SendAct, SendGrad:
			produced := isDone(Forward, st, mb)
			next := st + 1
			if a.Kind == SendGrad {
				produced, next = backwardDone(st, mb), st-1
			}
			if !produced {
				return false, fail(r, a, "sends data not computed yet")
			}
			if next < 0 || next >= nst || s.RankOf(next) != a.Peer || a.Peer == r {
				return false, fail(r, a, "peer %d does not hold stage %d", a.Peer, next)
			}
			l := link{r, a.Peer, a.Kind == SendGrad}
			queues[l] = append(queues[l], msg{st, mb, clock[r] + c.Comm})
		case RecvAct, RecvGrad:
			l := link{a.Peer, r, a.Kind == RecvGrad}
			q := queues[l]
			if len(q) == 0 {
				return false, nil // blocked
			}
			want := st - 1
			if a.Kind == RecvGrad {
				want = st + 1
			}
			if q[0].stage != want || q[0].mb != mb {
				return false, fail(r, a, "next message from rank %d is stage %d microbatch %d, want stage %d microbatch %d",
					a.Peer, q[0].stage, q[0].mb, want, mb)
			}
			queues[l] = q[1:]
			clock[r] = max(clock[r], q[0].at)
			start = clock[r]
			have[key{int(a.Kind), st, mb}] = true
		default:
			return false, fail(r, a, "unknown action kind")
		}
		res.Start[r][pc[r]] = start
		if a.Kind.IsCompute() {
			clock[r] += cost
			res.Busy[r] += cost
			done[key{int(a.Kind), st, mb}] = clock[r]
		}
		pc[r]++
		return true, nil
	}

	for {
		progress, finished := false, true
		for r := range s.Stages {
			for pc[r] < len(s.Ranks[r]) {
				ok, err := step(r)
				if err != nil {
					return nil, err
				}
				if !ok {
					break
				}
				progress = true
			}
			finished = finished && pc[r] == len(s.Ranks[r])
		}
		if finished {
			break
		}
		if !progress {
			var waits []string
			for r := range s.Stages {
				if pc[r] < len(s.Ranks[r]) {
					waits = append(waits, fmt.Sprintf("rank %d at action %d (%v)", r, pc[r], s.Ranks[r][pc[r]]))
				}
			}
			return nil, fmt.Errorf("pipeline: schedule %s: deadlock: %s", s.Name, strings.Join(waits, ", "))
		}
	}
	for l, q := range queues {
		if len(q) > 0 {
			return nil, fmt.Errorf("pipeline: schedule %s: %d messages from rank %d to rank %d never received", s.Name, len(q), l.from, l.to)
		}
	}
	split := s.Split()
	for st := range nst {
		for mb := range s.Microbatches {
			ok := isDone(Forward, st, mb) && isDone(Backward, st, mb) != split &&
				isDone(BackwardInput, st, mb) == split && isDone(BackwardWeight, st, mb) == split
			if !ok {
				return nil, fmt.Errorf("pipeline: schedule %s: stage %d microbatch %d is not computed exactly once forward and backward", s.Name, st, mb)
			}
		}
	}
	var busy float64
	for r := range s.Stages {
		res.Makespan = max(res.Makespan, clock[r])
		busy += res.Busy[r]
	}
	for r := range s.Stages {
		res.Idle = max(res.Idle, res.Makespan-res.Busy[r])
	}
	if res.Makespan > 0 {
		res.Bubble = 1 - busy/(float64(s.Stages)*res.Makespan)
	}
	return res, nil
}

// IdealBubble returns the bubble fraction of GPipe and 1F1B with equal
// stage costs, (P−1)/(M+P−1), and of interleaved 1F1B with V virtual
// stages, (P−1)/(V·M+P−1).
func IdealBubble(stages, virtual, microbatches int) float64 {
	p, v, m := float64(stages), float64(max(virtual, 1)), float64(microbatches)
	return (p - 1) / (v*m + p - 1)
}
