package ddp

import (
	"context"
	"fmt"

	"github.com/cohortml/cohort/internal/dp/wrapcore"
)

// joinState is the Join bookkeeping of one rank.
type joinState struct {
	lastActive []int // active ranks of the latest round that had any
	broken     bool  // a round failed: no further rounds
}

// round runs one join round with this rank's state.
func (m *Model) round(ctx context.Context, state int64) (wrapcore.JoinRound, error) {
	r, err := wrapcore.Round(ctx, "ddp", m.pg, state, &m.join.broken)
	if len(r.Active) > 0 {
		m.join.lastActive = r.Active
	}
	return r, err
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
	if err := m.core.Usable("Join"); err != nil {
		return err
	}
	m.join = &joinState{}
	defer func() { m.join = nil }()
	err := wrapcore.RunJoin(ctx, "ddp", m.red, &m.join.broken, m.round, body, func(r wrapcore.JoinRound) error {
		return m.shadowStep(ctx, r)
	})
	if err != nil {
		return err
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
func (m *Model) shadowStep(ctx context.Context, r wrapcore.JoinRound) error {
	if !m.o.NoBroadcastBuffers {
		if err := m.broadcastState(ctx, r.Authority, false); err != nil {
			return err
		}
	}
	m.beginStep(r, true)
	clear(m.flat)
	if m.flatDev != nil {
		m.flatDev.Fill(0)
	}
	m.ctx = ctx
	defer func() { m.ctx = nil }()
	m.red.StartAll()
	return m.finishStep(ctx)
}
