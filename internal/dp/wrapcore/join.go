package wrapcore

import "fmt"

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
