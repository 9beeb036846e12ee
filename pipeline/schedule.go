package pipeline

import (
	"fmt"
	"strings"
)

// Kind is what one Action does.
type Kind uint8

const (
	// Forward runs a stage on a microbatch; its input is the activation
	// received from the previous stage (none for stage 0).
	Forward Kind = iota
	// Backward is a whole backward pass of a stage on a microbatch: the
	// gradient of its input (sent to the previous stage) and of its
	// parameters.
	Backward
	// BackwardInput is the first half of a split backward (zero bubble's
	// "B"): the gradient of the stage's input, which the previous stage
	// waits for.
	BackwardInput
	// BackwardWeight is the second half (zero bubble's "W"): the gradient
	// of the stage's parameters, which nothing downstream waits for.
	BackwardWeight
	// SendAct and RecvAct move a stage's output activation to the next
	// stage; SendGrad and RecvGrad move the gradient of a stage's input to
	// the previous stage.
	SendAct
	RecvAct
	SendGrad
	RecvGrad
)

var kindNames = [...]string{"F", "B", "I", "W", "sendA", "recvA", "sendG", "recvG"}

func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("Kind(%d)", k)
}

// IsCompute reports whether k runs a stage (rather than moving data).
func (k Kind) IsCompute() bool { return k <= BackwardWeight }

// Action is one entry of a rank's schedule.
//
// Stage is the global stage index (0 … Stages·Virtual−1) the action
// belongs to: for a compute action, the stage computed; for SendAct and
// SendGrad, the stage that produced the data; for RecvAct and RecvGrad, the
// stage that consumes it. Peer is the other rank of a send or receive.
type Action struct {
	Kind       Kind
	Stage      int
	Microbatch int
	Peer       int
}

// format renders a as a golden token: "F3" (forward of microbatch 3),
// "sendA3>1" (send microbatch 3's activation to rank 1), "recvG3<1"; with
// virtual stages the stage follows after a slash ("F3/s2").
func (a Action) format(virtual bool) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%v%d", a.Kind, a.Microbatch)
	switch a.Kind {
	case SendAct, SendGrad:
		fmt.Fprintf(&b, ">%d", a.Peer)
	case RecvAct, RecvGrad:
		fmt.Fprintf(&b, "<%d", a.Peer)
	}
	if virtual {
		fmt.Fprintf(&b, "/s%d", a.Stage)
	}
	return b.String()
}

func (a Action) String() string { return a.format(true) }

// Schedule is the plan of one training step for every rank of a pipeline:
// Ranks[r] is the list of actions rank r performs, in order. Stage s lives
// on rank s mod Stages, as its chunk s / Stages (the looping placement of
// interleaved 1F1B; with Virtual = 1, stage s is rank s).
//
// Semantics (what the simulator checks and the executor relies on): a rank
// performs its actions in order; a send never blocks; a receive blocks
// until the matching send has happened. Between one pair of ranks, the
// activations (and separately the gradients) are received in the order
// they were sent. When two consecutive stages live on the same rank (only
// with Stages = 1) the data moves without send or receive actions.
type Schedule struct {
	Name         string // "gpipe", "1f1b", "interleaved", "zb"
	Stages       int    // ranks in the pipeline
	Virtual      int    // stages per rank (chunks); 1 except for interleaved
	Microbatches int
	Ranks        [][]Action
}

// NumStages returns the number of model stages, Stages·Virtual.
func (s *Schedule) NumStages() int { return s.Stages * s.Virtual }

// RankOf returns the rank that holds stage st.
func (s *Schedule) RankOf(st int) int { return st % s.Stages }

// Split reports whether the schedule splits backward into BackwardInput
// and BackwardWeight.
func (s *Schedule) Split() bool { return s.Name == "zb" }

// String renders the schedule as text, one line per rank (the golden
// format).
func (s *Schedule) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "schedule %s stages %d virtual %d microbatches %d\n", s.Name, s.Stages, s.Virtual, s.Microbatches)
	for r, acts := range s.Ranks {
		fmt.Fprintf(&b, "rank %d:", r)
		for _, a := range acts {
			b.WriteByte(' ')
			b.WriteString(a.format(s.Virtual > 1))
		}
		b.WriteByte('\n')
	}
	return b.String()
}

// Names lists the schedules NewSchedule knows.
func Names() []string { return []string{"gpipe", "1f1b", "interleaved", "zb"} }

// NewSchedule returns the named schedule ("gpipe", "1f1b", "interleaved" or "zb",
// the ZB-H1 zero-bubble schedule) for stages ranks, virtual stages per rank
// (1 unless interleaved; 0 means 2 for interleaved and 1 otherwise) and
// microbatches microbatches per step.
func NewSchedule(name string, stages, virtual, microbatches int) (*Schedule, error) {
	if stages < 1 || microbatches < 1 || virtual < 0 {
		return nil, fmt.Errorf("pipeline: schedule %s: %d stages, %d virtual, %d microbatches: want at least 1 stage and 1 microbatch", name, stages, virtual, microbatches)
	}
	if virtual == 0 {
		virtual = 1
		if name == "interleaved" {
			virtual = 2
		}
	}
	if virtual != 1 && name != "interleaved" {
		return nil, fmt.Errorf("pipeline: schedule %s has no virtual stages (got %d per rank)", name, virtual)
	}
	var order [][]Action
	switch name {
	case "gpipe":
		order = gpipeOrder(stages, microbatches)
	case "1f1b":
		order = oneF1BOrder(stages, microbatches)
	case "interleaved":
		if microbatches%stages != 0 {
			return nil, fmt.Errorf("pipeline: schedule interleaved: %d microbatches is not a multiple of %d stages", microbatches, stages)
		}
		order = interleavedOrder(stages, virtual, microbatches)
	case "zb":
		order = zbh1Order(stages, microbatches)
	default:
		return nil, fmt.Errorf("pipeline: unknown schedule %q (have %s)", name, strings.Join(Names(), ", "))
	}
	s := &Schedule{Name: name, Stages: stages, Virtual: virtual, Microbatches: microbatches}
	s.Ranks = s.withComms(order)
	return s, nil
}

// withComms inserts the sends and receives around each rank's compute
// order: a receive right before the compute that consumes it, a send right
// after the compute that produces it.
func (s *Schedule) withComms(order [][]Action) [][]Action {
	last := s.NumStages() - 1
	out := make([][]Action, len(order))
	for r, acts := range order {
		var l []Action
		for _, a := range acts {
			st, mb := a.Stage, a.Microbatch
			switch a.Kind {
			case Forward:
				if st > 0 && s.RankOf(st-1) != r {
					l = append(l, Action{Kind: RecvAct, Stage: st, Microbatch: mb, Peer: s.RankOf(st - 1)})
				}
				l = append(l, a)
				if st < last && s.RankOf(st+1) != r {
					l = append(l, Action{Kind: SendAct, Stage: st, Microbatch: mb, Peer: s.RankOf(st + 1)})
				}
			case Backward, BackwardInput:
				if st < last && s.RankOf(st+1) != r {
					l = append(l, Action{Kind: RecvGrad, Stage: st, Microbatch: mb, Peer: s.RankOf(st + 1)})
				}
				l = append(l, a)
				if st > 0 && s.RankOf(st-1) != r {
					l = append(l, Action{Kind: SendGrad, Stage: st, Microbatch: mb, Peer: s.RankOf(st - 1)})
				}
			default:
				l = append(l, a)
			}
		}
		out[r] = l
	}
	return out
}

func compute(k Kind, stage, mb int) Action {
	return Action{Kind: k, Stage: stage, Microbatch: mb, Peer: -1}
}
