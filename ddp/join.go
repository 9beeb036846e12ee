package ddp

import (
	"context"
	"fmt"

	"github.com/cohortml/cohort/distributed"
)

// Join rounds. Inside Join every synchronised or unsynchronised forward
// pass of a rank that still has data is one round: all ranks all-reduce a
// vector with one slot per rank holding that rank's state, so each rank
// learns which ranks are still training and whether they will reduce
// gradients this round. Ranks that have joined contribute "joined" and
// then issue exactly the collectives the training ranks issue in that
// round (buffer broadcast, bucket reductions with zero gradients, the
// one-time bucket rebuild). When a round shows every rank joined, the
// model is broadcast from one of the last ranks to train, since the others
// skipped the optimizer steps after they joined.

// Per-rank states in a join round.
const (
	joinJoined  = 0
	joinNoSync  = 1 // training, gradient sync off (NoSync)
	joinSyncing = 2 // training, gradients reduced this round
	joinFailed  = 3 // its training loop returned an error between steps
)

// joinRound is what a round's all-reduce tells every rank.
type joinRound struct {
	active    []int // ranks still training, ascending
	syncing   bool  // the active ranks reduce gradients this round
	authority int   // lowest active rank: the source of buffers; -1 if none
}

// decodeJoinRound interprets the summed state vector. Active ranks must
// agree on whether this round synchronises gradients.
func decodeJoinRound(states []int64) (joinRound, error) {
	r := joinRound{authority: -1}
	var noSync, syncing, failed []int
	for rank, s := range states {
		switch s {
		case joinFailed:
			failed = append(failed, rank)
			continue
		case joinJoined:
			continue
		case joinNoSync:
			noSync = append(noSync, rank)
		case joinSyncing:
			syncing = append(syncing, rank)
		default:
			return joinRound{}, fmt.Errorf("ddp: Join: rank %d sent state %d (a rank outside Join, or another collective in its place?)", rank, s)
		}
		r.active = append(r.active, rank)
	}
	if len(failed) > 0 {
		return joinRound{}, fmt.Errorf("ddp: Join: ranks %v stopped training with an error", failed)
	}
	if len(noSync) > 0 && len(syncing) > 0 {
		return joinRound{}, fmt.Errorf("ddp: Join: ranks disagree on gradient sync this step: ranks %v synchronise, ranks %v are in NoSync", syncing, noSync)
	}
	r.syncing = len(syncing) > 0
	if len(r.active) > 0 {
		r.authority = r.active[0]
	}
	return r, nil
}

// joinState is the Join bookkeeping of one rank.
type joinState struct {
	lastActive []int // active ranks of the latest round that had any
	broken     bool  // a round failed: no further rounds
}

// round runs one join round with this rank's state.
func (m *Model) round(ctx context.Context, state int64) (joinRound, error) {
	v := make([]int64, m.world)
	v[m.rank] = state
	if err := m.pg.AllReduce(ctx, distributed.I64(v), distributed.Sum).Wait(); err != nil {
		m.join.broken = true
		return joinRound{}, fmt.Errorf("ddp: Join: round all-reduce: %w", err)
	}
	r, err := decodeJoinRound(v)
	if err != nil {
		m.join.broken = true
		return joinRound{}, err
	}
	if len(r.active) > 0 {
		m.join.lastActive = r.active
	}
	return r, nil
}

// Join runs body, the training loop of this rank, in uneven-input mode,
// and returns once every rank's body has returned. While other ranks still
// train after this rank's body returns, this rank shadows their
// collectives with zero gradients, so nobody waits on a rank that ran out
// of data. Each training step's gradients are averaged over the ranks that
// still train (or over the world size with Options.JoinDivideByWorldSize).
// Afterwards every rank holds the parameters and buffers of the lowest of
// the last ranks to train; optimizer state is not synchronised.
//
// Every rank must call Join, around the same loop; inside it, every
// Forward of the model (training or evaluation) is a round, so evaluate
// through Module() instead. If body returns an error between steps (after
// a Backward, or before the first Forward), Join tells the other ranks in
// their next round, where they fail with an error naming this rank, and
// returns body's error; after an error in the middle of a step it returns
// at once, and the other ranks' pending collectives fail or time out in
// the process group.
func (m *Model) Join(ctx context.Context, body func() error) error {
	if m.join != nil {
		return fmt.Errorf("ddp: Join: already inside Join")
	}
	if err := m.usable("Join"); err != nil {
		return err
	}
	m.join = &joinState{}
	defer func() { m.join = nil }()
	if err := body(); err != nil {
		if !m.join.broken && !m.red.InFlight() {
			// Best effort: the others learn of it in their next round.
			_, _ = m.round(ctx, joinFailed)
		}
		return err
	}
	if m.red.InFlight() {
		return fmt.Errorf("ddp: Join: the last backward pass was not finished with Backward")
	}
	m.red.Disarm()
	for {
		r, err := m.round(ctx, joinJoined)
		if err != nil {
			return err
		}
		if len(r.active) == 0 {
			break
		}
		if !r.syncing {
			continue
		}
		if err := m.shadowStep(ctx, r); err != nil {
			return err
		}
	}
	if len(m.join.lastActive) == 0 {
		return nil // no rank trained inside Join: nothing diverged
	}
	if err := m.broadcastState(ctx, m.join.lastActive[0], true); err != nil {
		return fmt.Errorf("ddp: Join: final model broadcast from rank %d: %w", m.join.lastActive[0], err)
	}
	return nil
}

// shadowStep issues the collectives of one synchronised step of the ranks
// still training, contributing zeros.
func (m *Model) shadowStep(ctx context.Context, r joinRound) error {
	if !m.o.NoBroadcastBuffers {
		if err := m.broadcastState(ctx, r.authority, false); err != nil {
			return err
		}
	}
	m.beginStep(r, true)
	clear(m.flat)
	m.ctx = ctx
	defer func() { m.ctx = nil }()
	m.red.StartAll()
	return m.finishStep(ctx)
}

// Join states of one rank in a round, for other wrappers that run Join
// rounds like Model.Join (package zero): a rank writes its state into its
// slot of a vector the group sums, and DecodeJoinRound reads the sum.
const (
	JoinJoined  = joinJoined  // out of data: shadows the others' collectives
	JoinNoSync  = joinNoSync  // training, gradient sync off this round
	JoinSyncing = joinSyncing // training, gradients reduced this round
	JoinFailed  = joinFailed  // its training loop returned an error
)

// JoinRound is what one round tells every rank.
type JoinRound struct {
	Active  []int // ranks still training, ascending
	Syncing bool  // the active ranks reduce gradients this round
}

// DecodeJoinRound interprets a round's summed state vector (one slot per
// rank). Active ranks must agree on whether the round synchronises; a
// failed rank or a state out of range is an error naming the ranks.
func DecodeJoinRound(states []int64) (JoinRound, error) {
	r, err := decodeJoinRound(states)
	return JoinRound{Active: r.active, Syncing: r.syncing}, err
}
