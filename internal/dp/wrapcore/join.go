package wrapcore

import (
	"context"
	"fmt"

	"github.com/cohortml/cohort/distributed"
	"github.com/cohortml/cohort/internal/dp/reducer"
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

// Per-rank states in a join round: a rank writes its state into its slot
// of a vector the group sums, and DecodeJoinRound reads the sum.
const (
	JoinJoined  = 0 // out of data: shadows the others' collectives
	JoinNoSync  = 1 // training, gradient sync off (NoSync)
	JoinSyncing = 2 // training, gradients reduced this round
	JoinFailed  = 3 // its training loop returned an error between steps
)

// JoinRound is what a round's all-reduce tells every rank.
type JoinRound struct {
	Active    []int // ranks still training, ascending
	Syncing   bool  // the active ranks reduce gradients this round
	Authority int   // lowest active rank: the source of buffers; -1 if none
}

// DecodeJoinRound interprets the summed state vector (one slot per rank).
// Active ranks must agree on whether this round synchronises gradients; a
// failed rank or a state out of range is an error naming the ranks,
// prefixed by pkg.
func DecodeJoinRound(pkg string, states []int64) (JoinRound, error) {
	r := JoinRound{Authority: -1}
	var noSync, syncing, failed []int
	for rank, s := range states {
		switch s {
		case JoinFailed:
			failed = append(failed, rank)
			continue
		case JoinJoined:
			continue
		case JoinNoSync:
			noSync = append(noSync, rank)
		case JoinSyncing:
			syncing = append(syncing, rank)
		default:
			return JoinRound{}, fmt.Errorf("%s: Join: rank %d sent state %d (a rank outside Join, or another collective in its place?)", pkg, rank, s)
		}
		r.Active = append(r.Active, rank)
	}
	if len(failed) > 0 {
		return JoinRound{}, fmt.Errorf("%s: Join: ranks %v stopped training with an error", pkg, failed)
	}
	if len(noSync) > 0 && len(syncing) > 0 {
		return JoinRound{}, fmt.Errorf("%s: Join: ranks disagree on gradient sync this step: ranks %v synchronise, ranks %v are in NoSync", pkg, syncing, noSync)
	}
	r.Syncing = len(syncing) > 0
	if len(r.Active) > 0 {
		r.Authority = r.Active[0]
	}
	return r, nil
}

// Round runs one join round over pg with this rank's state: it sums the
// state vector and decodes it (DecodeJoinRound). A failure sets *broken
// (no further rounds); pkg prefixes errors.
func Round(ctx context.Context, pkg string, pg distributed.ProcessGroup, state int64, broken *bool) (JoinRound, error) {
	v := make([]int64, pg.Size())
	v[pg.Rank()] = state
	if err := pg.AllReduce(ctx, distributed.I64(v), distributed.Sum).Wait(); err != nil {
		*broken = true
		return JoinRound{}, fmt.Errorf("%s: Join: round all-reduce: %w", pkg, err)
	}
	r, err := DecodeJoinRound(pkg, v)
	if err != nil {
		*broken = true
		return JoinRound{}, err
	}
	return r, nil
}

// RunJoin is a wrapper's Join after its checks: it runs body, this rank's
// training loop, then takes part in rounds (JoinJoined) until one shows
// every rank joined, running shadow for each round in which the ranks
// still training synchronise gradients. If body fails between steps (no
// backward pass in flight, *broken false), the other ranks learn of it in
// their next round (best effort) and body's error is returned. red is the
// wrapper's reducer; round runs one round with this rank's state; pkg
// prefixes errors.
func RunJoin(ctx context.Context, pkg string, red *reducer.Reducer, broken *bool,
	round func(ctx context.Context, state int64) (JoinRound, error),
	body func() error, shadow func(JoinRound) error) error {
	if err := body(); err != nil {
		if !*broken && !red.InFlight() {
			_, _ = round(ctx, JoinFailed) // best effort: the others learn of it in their next round
		}
		return err
	}
	if red.InFlight() {
		return fmt.Errorf("%s: Join: the last backward pass was not finished with Backward", pkg)
	}
	red.Disarm()
	for {
		r, err := round(ctx, JoinJoined)
		if err != nil {
			return err
		}
		if len(r.Active) == 0 {
			return nil
		}
		if r.Syncing {
			if err := shadow(r); err != nil {
				return err
			}
		}
	}
}
