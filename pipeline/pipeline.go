package pipeline

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/cohortml/cohort/autograd"
	"github.com/cohortml/cohort/distributed"
	"github.com/cohortml/cohort/tensor"
)

// Stage is the part of the model one pipeline stage runs.
//
// Forward runs the stage on microbatch mb. in is the previous stage's
// output as a leaf that requires grad, or nil for the first stage, which
// reads its own input (the caller arranges which microbatch of data mb
// means). The last stage returns the microbatch's scalar loss; every other
// stage its output activation, of shape Options.Shape. With
// Options.Recompute, Forward is called twice per microbatch and must
// return the same values both times.
//
// Parameters lists the stage's trainable parameters: a split backward
// (the zero-bubble schedule) holds back their gradients between the input
// pass and the weight pass, and recomputation runs the first forward
// without tracking them.
type Stage interface {
	Forward(mb int, in *autograd.Var) (*autograd.Var, error)
	Parameters() []*autograd.Var
}

// Options configures a Pipeline; the zero value works for one stage.
type Options struct {
	// Shape is the shape of the activation passed between stages (and of
	// its gradient), e.g. [microbatch, T, D]. Required with more than one
	// stage.
	Shape []int
	// Recompute keeps only each stage's input during the forward pass and
	// runs the stage again, tracking the graph, just before its backward
	// pass (activation checkpointing at stage granularity).
	Recompute bool
	// LossScale multiplies each microbatch's loss before backward; 0 means
	// 1/Microbatches, so that gradients are those of the mean loss over
	// the step's batch.
	LossScale float64
	// Tied lists parameters shared by the first and the last stage (GPT's
	// token embedding and output head). The ranks holding those two stages
	// pass their copies, in the same order; other ranks pass nil. After the
	// backward passes of a step their gradients are summed between the two
	// ranks, so both copies take the same optimizer step.
	Tied []*autograd.Var
	// Split records how the model was cut into stages (see Split); ranks
	// check that they agree on it. Optional.
	Split []int
	// Span, when not nil, traces the executor's work as a per-action
	// timeline: it opens a span on a track and returns the function that
	// closes it. Compute actions go on track "compute" (named like the
	// schedule's goldens, e.g. "F3/s1"), waits for a received message on
	// "p2p" ("recvA3<0/s1"), and the step's end (waiting for sends, the
	// tied-gradient sum, the loss) on "comm". obs/trace's
	// Tracer.Begin(track, name).End fits.
	Span func(track, name string) (end func())
	// StageDone, when not nil, is called during Step right after the last
	// backward action of each stage this rank holds (its last weight pass,
	// for a split backward): that stage's parameter gradients are then
	// final for the step, except the tied parameters, whose sum between
	// the first and the last stage follows at the end of Step. A caller
	// can start reducing them (e.g. a data-parallel all-reduce) while the
	// rest of the step runs. It runs on Step's goroutine and should only
	// launch work.
	StageDone func(stage int)
	// SendsBuffered says that pg's sends complete without waiting for the
	// matching receive: true of the native backend over every cohort
	// transport (shm, tcp, inproc), not of MPI, whose large sends wait for
	// the receive. Step then runs each send of less than 2 MiB at once on
	// its own goroutine, instead of leaving it to dist's op goroutine, and
	// the peer gets it without waiting for that goroutine to be scheduled
	// (see the package doc). Waiting for a send that needs its receive
	// could deadlock two ranks that send to each other before receiving,
	// so the zero value keeps every send asynchronous until the step's end.
	SendsBuffered bool
}

// Pipeline executes a Schedule on one rank of a pipeline group: each rank
// of pg holds the stages s with s mod pg.Size() == pg.Rank().
//
// Communication: activations and gradients travel between ranks on
// two-rank subgroups of pg, one per direction and kind, so that a receive
// waiting for its message never holds back a send (ops of one group run in
// issue order). Every send is made when its data is ready and every
// receive where the schedule puts it, right before its consumer. Receives
// run on Step's goroutine (see the package doc); so do small sends with
// Options.SendsBuffered, while other sends run on dist's op goroutines and
// are waited for at the step's end.
//
// Failure: when an action fails on one rank (a stage returns an error or
// panics, or a peer goes away), that rank aborts every subgroup the
// pipeline uses, which fails its peers' pending and later operations
// promptly (they name the failed rank); the Pipeline is then broken and
// every later call returns the first error.
//
// A Pipeline is used by one goroutine at a time.
type Pipeline struct {
	pg     distributed.ProcessGroup
	sched  *Schedule
	rank   int
	acts   []Action
	stages map[int]Stage // by global stage index
	opts   Options
	last   int // last global stage

	links map[linkKey]distributed.ProcessGroup
	ctl   distributed.ProcessGroup // all ranks: loss, tied gradients, norms, abort
	tied  distributed.ProcessGroup // ranks of the first and last stage, when they differ
	err   error
	stats Stats

	lastBackward map[int]int // action index → the stage whose last backward action it is

	free []*tensor.Tensor // receive buffers of Options.Shape, reused across steps
	flat []float32        // the tied gradients' all-reduce buffer
	// tiedBase holds the tied gradients as the running Step found them
	// (what earlier Steps accumulated, the same on both copies): only the
	// Step's own contribution is summed between the copies.
	tiedBase []float32
}

// Stats are a Pipeline's cumulative timings over its successful steps.
// Compute is the time spent in the stages' forward and backward passes;
// the rest of Wall went to waiting for peers and to bookkeeping, so
// 1 − Compute/Wall is this rank's measured bubble.
//
// The breakdown says where the time went: Compute is Forward + Backward +
// Input + Weight (whole backward passes, and a split backward's input and
// weight passes), each with its count; RecvWait is time blocked on a
// received activation or gradient (including its copy out of the
// transport), SendWait time in this rank's sends (the copy into the
// transport, and waiting at the step's end for those left to dist's op
// goroutines), Sync the step-end collectives (the tied-gradient sum and
// the loss broadcast).
type Stats struct {
	Steps   int
	Wall    time.Duration // time inside Step
	Compute time.Duration

	Forward, Backward, Input, Weight     time.Duration
	NForward, NBackward, NInput, NWeight int
	RecvWait, SendWait, Sync             time.Duration
}

// pass returns the time and the count of the passes of compute kind k,
// or nils for another kind.
func (s *Stats) pass(k Kind) (*time.Duration, *int) {
	switch k {
	case Forward:
		return &s.Forward, &s.NForward
	case Backward:
		return &s.Backward, &s.NBackward
	case BackwardInput:
		return &s.Input, &s.NInput
	case BackwardWeight:
		return &s.Weight, &s.NWeight
	}
	return nil, nil
}

// Sub returns s − o, the timings between two snapshots.
func (s Stats) Sub(o Stats) Stats {
	return Stats{Steps: s.Steps - o.Steps, Wall: s.Wall - o.Wall, Compute: s.Compute - o.Compute,
		Forward: s.Forward - o.Forward, Backward: s.Backward - o.Backward, Input: s.Input - o.Input, Weight: s.Weight - o.Weight,
		NForward: s.NForward - o.NForward, NBackward: s.NBackward - o.NBackward, NInput: s.NInput - o.NInput, NWeight: s.NWeight - o.NWeight,
		RecvWait: s.RecvWait - o.RecvWait, SendWait: s.SendWait - o.SendWait, Sync: s.Sync - o.Sync}
}

// Costs returns the mean durations, in seconds, of this rank's forward,
// input-gradient and weight-gradient passes, for Simulate: a whole
// backward pass counts half as B and half as W, as UnitCosts does.
func (s Stats) Costs() Costs {
	mean := func(d time.Duration, n int) float64 {
		if n == 0 {
			return 0
		}
		return d.Seconds() / float64(n)
	}
	c := Costs{F: mean(s.Forward, s.NForward)}
	if s.NInput > 0 {
		c.B, c.W = mean(s.Input, s.NInput), mean(s.Weight, s.NWeight)
	} else {
		c.B = mean(s.Backward, s.NBackward) / 2
		c.W = c.B
	}
	return c
}

type linkKey struct {
	from, to int
	grad     bool
}

// New builds the pipeline executor for this rank. stages are this rank's
// stages in chunk order: stages[c] is global stage c·Stages + rank. New is a
// collective op of pg: every rank calls it, and the ranks first exchange a
// fingerprint of their schedule, options and split, so ranks that
// disagree get an error naming them instead of a hang.
func New(ctx context.Context, pg distributed.ProcessGroup, s *Schedule, stages []Stage, o Options) (*Pipeline, error) {
	if pg == nil || s == nil {
		return nil, errors.New("pipeline: New: nil process group or schedule")
	}
	if pg.Size() != s.Stages {
		return nil, fmt.Errorf("pipeline: schedule %s has %d stages but the process group has %d ranks", s.Name, s.Stages, pg.Size())
	}
	r := pg.Rank()
	if len(stages) != s.Virtual {
		return nil, fmt.Errorf("pipeline: rank %d: %d stages given, schedule %s holds %d per rank", r, len(stages), s.Name, s.Virtual)
	}
	if s.NumStages() > 1 && len(o.Shape) == 0 {
		return nil, fmt.Errorf("pipeline: rank %d: Options.Shape (the activation shape between stages) is required with %d stages", r, s.NumStages())
	}
	for _, d := range o.Shape {
		if d <= 0 {
			return nil, fmt.Errorf("pipeline: rank %d: Options.Shape %v has a non-positive size", r, o.Shape)
		}
	}
	if o.LossScale == 0 {
		o.LossScale = 1 / float64(s.Microbatches)
	}
	p := &Pipeline{pg: pg, sched: s, rank: r, acts: s.Ranks[r], stages: map[int]Stage{}, opts: o,
		last: s.NumStages() - 1, links: map[linkKey]distributed.ProcessGroup{}}
	for c, st := range stages {
		if st == nil {
			return nil, fmt.Errorf("pipeline: rank %d: stage %d is nil", r, c*s.Stages+r)
		}
		p.stages[c*s.Stages+r] = st
	}
	last := map[int]int{} // stage → index of its last backward action
	for i, a := range p.acts {
		if a.Kind == Backward || a.Kind == BackwardWeight {
			last[a.Stage] = i
		}
	}
	p.lastBackward = map[int]int{}
	for st, i := range last {
		p.lastBackward[i] = st
	}
	if s.Stages == 1 {
		return p, nil
	}
	if err := checkFingerprint(ctx, pg, p.fingerprint(), s.RankOf(0), s.RankOf(p.last)); err != nil {
		return nil, err
	}
	// Subgroups, created in the same order on every rank (the schedule is
	// the same everywhere, as the fingerprint just showed).
	used := map[linkKey]bool{}
	for rr, acts := range s.Ranks {
		for _, a := range acts {
			if a.Kind == SendAct || a.Kind == SendGrad {
				used[linkKey{rr, a.Peer, a.Kind == SendGrad}] = true
			}
		}
	}
	fail := func(err error) (*Pipeline, error) {
		p.closeGroups(false, -1)
		return nil, fmt.Errorf("pipeline: rank %d: forming subgroups: %w", r, err)
	}
	for from := range s.Stages {
		for to := range s.Stages {
			for _, grad := range []bool{false, true} {
				k := linkKey{from, to, grad}
				if !used[k] {
					continue
				}
				g, err := distributed.NewGroup(ctx, pg, []int{from, to})
				if err != nil {
					return fail(err)
				}
				if g != nil {
					p.links[k] = g
				}
			}
		}
	}
	all := make([]int, s.Stages)
	for i := range all {
		all[i] = i
	}
	g, err := distributed.NewGroup(ctx, pg, all)
	if err != nil {
		return fail(err)
	}
	p.ctl = g
	first, lastRank := s.RankOf(0), s.RankOf(p.last)
	if first != lastRank {
		g, err := distributed.NewGroup(ctx, pg, []int{first, lastRank})
		if err != nil {
			return fail(err)
		}
		p.tied = g
	}
	return p, nil
}

// Schedule returns the schedule the pipeline runs.
func (p *Pipeline) Schedule() *Schedule { return p.sched }

// holdsTiedCopy reports whether this rank holds the last stage's copy of
// the tied parameters on a rank of its own (counted once in norms).
func (p *Pipeline) holdsTiedCopy() bool {
	return p.tied != nil && p.rank == p.sched.RankOf(p.last)
}

// stepState is what one Step holds between actions.
type stepState struct {
	recvs    map[msgKey]*pendingRecv
	local    map[msgKey]*tensor.Tensor // data passed between stages of this rank
	fwd      map[fwdKey]*fwdState
	sends    []pendingSend
	losses   float64
	bufs     []*tensor.Tensor // receive buffers: bufs[:taken] posted this step, the rest spare
	taken    int
	wait     time.Duration // spent waiting for received data
	sendWait time.Duration // spent in sends waited for at once
	name     string        // the compute action's span name (with Options.Span)
}

type msgKey struct {
	grad      bool
	stage, mb int // the consuming stage
}

type fwdKey struct{ stage, mb int }

type pendingRecv struct {
	w    distributed.Work
	buf  *tensor.Tensor
	peer int
}

type pendingSend struct {
	w    distributed.Work
	peer int
}

type fwdState struct {
	inVal      *tensor.Tensor // the stage's input value (nil for stage 0)
	in, out    *autograd.Var  // graph (nil between a recomputing forward and its backward)
	outVal     *tensor.Tensor // the output's value, contiguous, for sending
	weightPass func()         // split backward: what is left after the input pass
}

// tag numbers a message by microbatch and producing stage.
func (p *Pipeline) tag(producer, mb int) int { return mb*p.sched.NumStages() + producer }

// Step runs one training step: the forward and backward passes of every
// microbatch as the schedule orders them, then the tied-parameter
// gradient sum. Gradients accumulate into the stages' parameters (zero
// them between steps). It returns the mean loss over the microbatches, on
// every rank.
func (p *Pipeline) Step(ctx context.Context) (loss float64, err error) {
	if p.err != nil {
		return 0, p.err
	}
	start := time.Now()
	st := &stepState{recvs: map[msgKey]*pendingRecv{}, local: map[msgKey]*tensor.Tensor{}, fwd: map[fwdKey]*fwdState{}}
	p.snapshotTied()
	// Receives are posted at their actions, into buffers reused from the
	// last step (nothing holds them once a step is over). After a failure
	// a receive may still be pending, so its buffer is dropped with the
	// broken pipeline.
	st.bufs = p.free
	p.free = nil
	defer func() {
		if err == nil {
			p.free = st.bufs
		}
	}()
	var stats Stats
	virtual := p.sched.Virtual > 1
	for i, a := range p.acts {
		t0, wait0 := time.Now(), st.wait
		if p.opts.Span != nil && a.Kind.IsCompute() {
			st.name = a.format(virtual)
		}
		if err := p.do(ctx, st, a); err != nil {
			return 0, p.fail(ctx, fmt.Errorf("pipeline: rank %d: action %d (%v): %w", p.rank, i, a, err))
		}
		if a.Kind.IsCompute() {
			d := time.Since(t0) - (st.wait - wait0)
			stats.Compute += d
			if t, n := stats.pass(a.Kind); t != nil {
				*t += d
				*n++
			}
			if stage, ok := p.lastBackward[i]; ok && p.opts.StageDone != nil {
				p.opts.StageDone(stage)
			}
		}
	}
	stats.RecvWait = st.wait
	t0 := time.Now()
	end := p.span("comm", "sends")
	for _, s := range st.sends {
		if err := p.waitLink(ctx, s.w, s.peer); err != nil {
			return 0, p.fail(ctx, fmt.Errorf("pipeline: rank %d: send to rank %d: %w", p.rank, s.peer, err))
		}
	}
	end()
	t1 := time.Now()
	stats.SendWait = st.sendWait + t1.Sub(t0)
	end = p.span("comm", "tied+loss")
	if err := p.reduceTied(ctx); err != nil {
		return 0, p.fail(ctx, err)
	}
	loss = st.losses / float64(p.sched.Microbatches)
	if p.ctl != nil {
		buf := []float64{loss}
		if err := waitWork(ctx, p.ctl.Broadcast(ctx, distributed.F64(buf), p.sched.RankOf(p.last))); err != nil {
			return 0, p.fail(ctx, fmt.Errorf("pipeline: rank %d: loss broadcast: %w", p.rank, err))
		}
		loss = buf[0]
	}
	end()
	stats.Sync = time.Since(t1)
	stats.Steps = 1
	stats.Wall = time.Since(start)
	p.stats = p.stats.add(stats)
	return loss, nil
}

// add returns s + o (s minus the negated o).
func (s Stats) add(o Stats) Stats { return s.Sub(Stats{}.Sub(o)) }

// span opens a span when Options.Span is set.
func (p *Pipeline) span(track, name string) func() {
	if p.opts.Span == nil {
		return func() {}
	}
	return p.opts.Span(track, name)
}

// waitLink waits for a transfer with peer. A failure is the peer's
// (linkError), unless this rank's own context was cancelled: then it began
// here.
func (p *Pipeline) waitLink(ctx context.Context, w distributed.Work, peer int) error {
	err := waitWork(ctx, w)
	if err == nil {
		return nil
	}
	if errors.Is(ctx.Err(), context.Canceled) {
		return fmt.Errorf("cancelled: %w", ctx.Err())
	}
	return &linkError{peer, err}
}

// Stats returns the timings of the steps so far.
func (p *Pipeline) Stats() Stats { return p.stats }

// do performs one action.
func (p *Pipeline) do(ctx context.Context, st *stepState, a Action) error {
	k := fwdKey{a.Stage, a.Microbatch}
	switch a.Kind {
	case RecvAct, RecvGrad:
		p.post(ctx, st, a)
		return nil // waited for by its consumer
	case Forward:
		return p.forward(ctx, st, a)
	case Backward, BackwardInput:
		return p.backward(ctx, st, a)
	case BackwardWeight:
		f := st.fwd[k]
		if f == nil || f.weightPass == nil {
			return errors.New("weight pass without an input pass")
		}
		delete(st.fwd, k)
		defer p.span("compute", st.name)()
		return guard(fmt.Sprintf("stage %d weight pass", a.Stage), f.weightPass)
	case SendAct:
		f := st.fwd[k]
		if f == nil || f.outVal == nil {
			return errors.New("sending an activation not computed")
		}
		return p.send(ctx, st, a, false, f.outVal)
	case SendGrad:
		buf := st.local[msgKey{true, a.Stage - 1, a.Microbatch}]
		if buf == nil {
			return errors.New("sending a gradient not computed")
		}
		delete(st.local, msgKey{true, a.Stage - 1, a.Microbatch})
		return p.send(ctx, st, a, true, buf)
	}
	return fmt.Errorf("unknown action kind %v", a.Kind)
}

// inlineSendBytes is the size below which, with Options.SendsBuffered, a
// send is waited for at once. Waiting runs the send on Step's goroutine
// (dist's Work.Wait runs an op that is next in its group on the waiting
// goroutine): a copy into the shared-memory ring or the socket. Left to
// dist's op goroutine, the same copy waits for that goroutine's thread to
// get a core, which on a host whose cores all compute (a rank per core)
// is a scheduler slice, milliseconds, while the peer waits for the
// message: GPT-mini's 1 MiB activations (microbatches of 32 sequences)
// reached the next stage 7–9 ms after their pass ended while the bound
// was 1 MiB. Messages of shm's single-copy size (its RendezvousBytes,
// 2 MiB) or more wait for the receiver to read them: they go on the op
// goroutine and are waited for at the step's end.
const inlineSendBytes = 2 << 20

// send sends data, the output (grad false) or the input gradient of
// action a's stage for its microbatch, to a.Peer.
func (p *Pipeline) send(ctx context.Context, st *stepState, a Action, grad bool, data *tensor.Tensor) error {
	g := p.links[linkKey{p.rank, a.Peer, grad}]
	w := g.Send(ctx, distributed.FromTensor(data), 1, p.tag(a.Stage, a.Microbatch))
	if !p.opts.SendsBuffered || int64(data.Len())*4 >= inlineSendBytes {
		st.sends = append(st.sends, pendingSend{w, a.Peer})
		return nil
	}
	t0 := time.Now()
	err := p.waitLink(ctx, w, a.Peer)
	st.sendWait += time.Since(t0)
	return err
}

// post posts the receive of action a into a buffer of Options.Shape.
func (p *Pipeline) post(ctx context.Context, st *stepState, a Action) {
	grad := a.Kind == RecvGrad
	producer := a.Stage - 1
	if grad {
		producer = a.Stage + 1
	}
	if st.taken == len(st.bufs) {
		st.bufs = append(st.bufs, tensor.New(p.opts.Shape...))
	}
	buf := st.bufs[st.taken]
	st.taken++
	g := p.links[linkKey{a.Peer, p.rank, grad}]
	st.recvs[msgKey{grad, a.Stage, a.Microbatch}] = &pendingRecv{w: g.Recv(ctx, distributed.FromTensor(buf), 0, p.tag(producer, a.Microbatch)), buf: buf, peer: a.Peer}
}

// input returns the data stage consumes for microbatch mb: an activation
// (grad false) or an output gradient, local or received.
func (p *Pipeline) input(ctx context.Context, st *stepState, grad bool, stage, mb int) (*tensor.Tensor, error) {
	k := msgKey{grad, stage, mb}
	if t, ok := st.local[k]; ok {
		delete(st.local, k)
		return t, nil
	}
	r := st.recvs[k]
	if r == nil {
		return nil, errors.New("input neither computed on this rank nor received")
	}
	delete(st.recvs, k)
	t0 := time.Now()
	select {
	case <-r.w.Done():
	default:
		kind := RecvAct
		if grad {
			kind = RecvGrad
		}
		end := p.span("p2p", Action{Kind: kind, Stage: stage, Microbatch: mb, Peer: r.peer}.format(p.sched.Virtual > 1))
		defer end()
	}
	err := p.waitLink(ctx, r.w, r.peer)
	st.wait += time.Since(t0)
	if err != nil {
		return nil, err
	}
	return r.buf, nil
}

// guard runs fn, turning a panic into an error.
func guard(what string, fn func()) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("%s panicked: %v", what, v)
		}
	}()
	fn()
	return nil
}

// run calls the stage's Forward, turning a panic into an error.
func (p *Pipeline) run(stage, mb int, in *autograd.Var) (out *autograd.Var, err error) {
	defer func() {
		if v := recover(); v != nil {
			out, err = nil, fmt.Errorf("stage %d panicked: %v", stage, v)
		}
	}()
	out, err = p.stages[stage].Forward(mb, in)
	if err == nil && out == nil {
		err = fmt.Errorf("stage %d returned no output", stage)
	}
	return out, err
}

func (p *Pipeline) forward(ctx context.Context, st *stepState, a Action) error {
	f := &fwdState{}
	if a.Stage > 0 {
		t, err := p.input(ctx, st, false, a.Stage, a.Microbatch)
		if err != nil {
			return err
		}
		f.inVal = t
	}
	defer p.span("compute", st.name)()
	var in *autograd.Var
	if f.inVal != nil {
		in = autograd.NewVar(f.inVal, !p.opts.Recompute)
	}
	var restore func()
	if p.opts.Recompute {
		restore = autograd.NoGrad(p.stages[a.Stage].Parameters()...)
	}
	out, err := p.run(a.Stage, a.Microbatch, in)
	if restore != nil {
		restore()
	}
	if err != nil {
		return err
	}
	if a.Stage == p.last {
		if out.Value.Len() != 1 {
			return fmt.Errorf("last stage returned shape %v, want a scalar loss", out.Value.Shape())
		}
		st.losses += float64(out.Value.Item())
	} else {
		if !slices.Equal(out.Value.Shape(), p.opts.Shape) {
			return fmt.Errorf("stage %d output shape %v, Options.Shape %v", a.Stage, out.Value.Shape(), p.opts.Shape)
		}
		f.outVal = out.Value.Contiguous()
		if p.sched.RankOf(a.Stage+1) == p.rank {
			st.local[msgKey{false, a.Stage + 1, a.Microbatch}] = f.outVal
		}
	}
	if !p.opts.Recompute {
		f.in, f.out = in, out
	}
	st.fwd[fwdKey{a.Stage, a.Microbatch}] = f
	return nil
}

func (p *Pipeline) backward(ctx context.Context, st *stepState, a Action) error {
	k := fwdKey{a.Stage, a.Microbatch}
	f := st.fwd[k]
	if f == nil {
		return errors.New("backward before forward")
	}
	var g *tensor.Tensor
	if a.Stage == p.last {
		g = tensor.Full(float32(p.opts.LossScale))
	} else {
		t, err := p.input(ctx, st, true, a.Stage, a.Microbatch)
		if err != nil {
			return err
		}
		g = t
	}
	defer p.span("compute", st.name)()
	if p.opts.Recompute {
		if f.inVal != nil {
			f.in = autograd.NewVar(f.inVal, true)
		}
		out, err := p.run(a.Stage, a.Microbatch, f.in)
		if err != nil {
			return fmt.Errorf("recomputing: %w", err)
		}
		f.out = out
	}
	if a.Stage == p.last {
		g = g.Reshape(f.out.Value.Shape()...)
	}
	if !f.out.RequiresGrad() {
		return fmt.Errorf("stage %d output does not require grad", a.Stage)
	}
	err := guard(fmt.Sprintf("stage %d backward", a.Stage), func() {
		if a.Kind == BackwardInput {
			f.weightPass = autograd.BackwardSplit(f.out, g, p.stages[a.Stage].Parameters())
		} else {
			autograd.BackwardGrad(f.out, g)
		}
	})
	if err != nil {
		return err
	}
	if a.Stage > 0 {
		gin := f.in.Grad
		if gin == nil {
			gin = tensor.New(f.inVal.Shape()...)
		}
		st.local[msgKey{true, a.Stage - 1, a.Microbatch}] = gin.Contiguous()
	}
	f.in, f.out, f.inVal, f.outVal = nil, nil, nil, nil
	if a.Kind == Backward {
		delete(st.fwd, k)
	}
	return nil
}

// reduceTied sums the tied parameters' gradients between the first and
// the last stage's ranks.
// snapshotTied records the tied gradients as a Step begins (zero where a
// Grad is nil), so that reduceTied sums only the Step's contribution:
// with gradients accumulated over several Steps, summing the whole Grad
// would count the earlier Steps' sum, already on both copies, twice.
func (p *Pipeline) snapshotTied() {
	if p.tied == nil || len(p.opts.Tied) == 0 {
		return
	}
	base := p.tiedBase[:0]
	for _, v := range p.opts.Tied {
		if v.Grad == nil {
			n := len(base)
			base = slices.Grow(base, v.Value.Len())[:n+v.Value.Len()]
			clear(base[n:])
		} else {
			base = append(base, v.Grad.Contiguous().Data()...)
		}
	}
	p.tiedBase = base
}

func (p *Pipeline) reduceTied(ctx context.Context) error {
	if p.tied == nil || len(p.opts.Tied) == 0 {
		return nil
	}
	n := 0
	for _, v := range p.opts.Tied {
		n += v.Value.Len()
	}
	if cap(p.flat) < n {
		p.flat = make([]float32, 0, n)
	}
	flat := p.flat[:0]
	for _, v := range p.opts.Tied {
		if v.Grad == nil {
			v.Grad = tensor.New(v.Value.Shape()...)
		}
		flat = append(flat, v.Grad.Contiguous().Data()...)
	}
	for i, b := range p.tiedBase[:n] { // this Step's contribution
		flat[i] -= b
	}
	if err := waitWork(ctx, p.tied.AllReduce(ctx, distributed.F32(flat), distributed.Sum)); err != nil {
		return fmt.Errorf("pipeline: rank %d: tied gradient all-reduce: %w", p.rank, err)
	}
	off := 0
	for _, v := range p.opts.Tied {
		d := v.Grad.Data()
		for i := range d {
			d[i] = p.tiedBase[off+i] + flat[off+i]
		}
		off += len(d)
	}
	return nil
}

// waitWork waits for w, an op submitted with ctx. It calls Work.Wait,
// which runs a native op that is next in its group on this goroutine
// rather than waking dist's op goroutine and then being woken by it: on a
// host whose cores all compute, each of those wake-ups waits for a
// scheduler slice. The op itself stops when ctx is done or dist's op
// timeout passes, so the wait is bounded by both (with the MPI backend,
// only until the op is handed to MPI, as dist documents).
func waitWork(ctx context.Context, w distributed.Work) error {
	return w.Wait()
}

// noticeGrace bounds how long a rank that failed because of a peer waits
// for the abort notice that names the rank where the failure began.
const noticeGrace = 200 * time.Millisecond

// Aborting: a rank that fails posts, on every subgroup, a receive that
// never completes and then closes the subgroup, which makes dist notify
// the subgroup's peers (a closed group with a pending op tells them). The
// receive's tag is abortTagBase + the pipeline rank where the failure
// began, and the notice carries the op's sequence number, which holds the
// tag; so every rank can name that rank, even when the failure reached it
// through others.
const abortTagBase = 1 << 30

// linkError is the failure of a transfer with a peer rank.
type linkError struct {
	peer int
	err  error
}

func (e *linkError) Error() string { return e.err.Error() }
func (e *linkError) Unwrap() error { return e.err }

// fail breaks the pipeline with err: it aborts every subgroup (telling
// the peers) and records the error, naming the rank where the failure
// began when that is another one.
func (p *Pipeline) fail(ctx context.Context, err error) error {
	if p.err != nil {
		return p.err
	}
	culprit := p.culprit(err)
	if culprit != p.rank && p.ctl != nil {
		// If the control group was aborted, a receive there fails at once
		// with the notice, which names the rank where the failure began.
		w := p.ctl.Recv(context.WithoutCancel(ctx), distributed.F32(make([]float32, 1)), (p.rank+1)%p.sched.Stages, abortTagBase+culprit)
		select {
		case <-w.Done():
			// The error is this receive's own (tagged with this rank's
			// guess); the notice is its cause.
			var own *distributed.OpError
			if e := w.Wait(); errors.As(e, &own) {
				if c := abortCulprit(own.Err); c >= 0 && c < p.sched.Stages {
					culprit = c
				}
			}
		case <-time.After(noticeGrace):
		}
	}
	if culprit != p.rank {
		var held []int
		for st := culprit; st < p.sched.NumStages(); st += p.sched.Stages {
			held = append(held, st)
		}
		err = fmt.Errorf("%w (the failure began on pipeline rank %d, holding stages %v)", err, culprit, held)
	}
	p.err = err
	p.closeGroups(true, culprit)
	return err
}

// culprit returns the pipeline rank where the failure err began, as far as
// this rank can tell: the one an abort notice names, else the peer of a
// failed transfer, else this rank.
func (p *Pipeline) culprit(err error) int {
	if c := abortCulprit(err); c >= 0 && c < p.sched.Stages {
		return c
	}
	var le *linkError
	if errors.As(err, &le) {
		return le.peer
	}
	return p.rank
}

// abortCulprit finds, in err's tree, an op whose sequence number is that
// of an abort receive and returns the rank its tag names, or −1.
func abortCulprit(err error) int {
	if err == nil {
		return -1
	}
	if oe, ok := err.(*distributed.OpError); ok && oe.Seq>>63 == 1 {
		if tag := int(oe.Seq >> 32 & (1<<31 - 1)); tag >= abortTagBase {
			return tag - abortTagBase
		}
	}
	switch u := err.(type) {
	case interface{ Unwrap() []error }:
		for _, e := range u.Unwrap() {
			if c := abortCulprit(e); c >= 0 {
				return c
			}
		}
	case interface{ Unwrap() error }:
		return abortCulprit(u.Unwrap())
	}
	return -1
}

// closeGroups closes the pipeline's subgroups; with abort, each first gets
// a pending receive tagged with the culprit, so that closing it tells its
// peers (see abortTagBase).
func (p *Pipeline) closeGroups(abort bool, culprit int) {
	gs := []distributed.ProcessGroup{p.ctl, p.tied}
	for _, g := range p.links {
		gs = append(gs, g)
	}
	for _, g := range gs {
		if g == nil {
			continue
		}
		if abort {
			peer := 0
			if g.Rank() == 0 {
				peer = 1
			}
			g.Recv(context.Background(), distributed.F32(make([]float32, 1)), peer, abortTagBase+culprit)
		}
		g.Close()
	}
}

// Close releases the pipeline's subgroups (not pg). It does not
// synchronise with the peers: call it once every rank is done stepping.
func (p *Pipeline) Close() error {
	p.closeGroups(false, -1)
	if p.err == nil {
		p.err = errors.New("pipeline: closed")
	}
	return nil
}

// ClipGradNorm scales the gradients of params, this rank's parameters,
// so that the norm over every stage's parameters is at most maxNorm, and
// returns that norm before scaling (see the package function). The last
// stage's copy of the tied parameters is left out of the norm, as the
// first stage's copy counts them.
func (p *Pipeline) ClipGradNorm(ctx context.Context, params []*autograd.Var, maxNorm float64) (float64, error) {
	if p.err != nil {
		return 0, p.err
	}
	var counted, extra []*autograd.Var
	for _, v := range params {
		if p.holdsTiedCopy() && slices.Contains(p.opts.Tied, v) {
			extra = append(extra, v)
		} else {
			counted = append(counted, v)
		}
	}
	n, err := ClipGradNorm(ctx, p.ctl, counted, extra, maxNorm)
	if err != nil && errors.Is(err, distributed.ErrAborted) {
		return n, p.fail(ctx, err)
	}
	return n, err
}

// ClipGradNorm is optim.ClipGradNorm (2-norm) across the ranks of pg: the
// squared norms of each rank's counted gradients are summed over pg, and
// every rank scales its counted and extra gradients by
// maxNorm/(norm + 1e-6) when that is below 1. It returns the total norm,
// the same on every rank. pg may be nil for a single rank. A NaN or
// infinite norm is an error and leaves the gradients unchanged.
func ClipGradNorm(ctx context.Context, pg distributed.ProcessGroup, counted, extra []*autograd.Var, maxNorm float64) (float64, error) {
	if math.IsNaN(maxNorm) || maxNorm < 0 {
		return 0, fmt.Errorf("pipeline: ClipGradNorm: maxNorm = %v, want >= 0", maxNorm)
	}
	var sum float64
	for _, v := range counted {
		if v.Grad == nil {
			continue
		}
		for _, x := range v.Grad.Contiguous().Data() {
			sum += float64(x) * float64(x)
		}
	}
	if pg != nil && pg.Size() > 1 {
		buf := []float64{sum}
		if err := waitWork(ctx, pg.AllReduce(ctx, distributed.F64(buf), distributed.Sum)); err != nil {
			return 0, fmt.Errorf("pipeline: ClipGradNorm: rank %d: %w", pg.Rank(), err)
		}
		sum = buf[0]
	}
	total := math.Sqrt(sum)
	if math.IsNaN(total) || math.IsInf(total, 0) {
		return total, fmt.Errorf("pipeline: ClipGradNorm: total norm is %v", total)
	}
	coef := maxNorm / (total + 1e-6)
	if coef < 1 {
		c := float32(coef)
		for _, v := range slices.Concat(counted, extra) {
			if v.Grad == nil {
				continue
			}
			if !v.Grad.IsContiguous() {
				return total, fmt.Errorf("pipeline: ClipGradNorm: a gradient of shape %v is not contiguous", v.Grad.Shape())
			}
			d := v.Grad.Data()
			for i := range d {
				d[i] *= c
			}
		}
	}
	return total, nil
}
