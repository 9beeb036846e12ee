package zero

// Join rounds, as ddp.Model.Join runs them (the round codec is the shared
// wrapcore's), plus one step further: a rank that has run out of data still owns its shard of the optimizer state,
// so it keeps stepping it. Every forward pass of a rank that trains is a
// round (an all-reduce of one state per rank, wrapcore.DecodeJoinRound reads
// it). In a synchronised round a joined rank issues the reductions of the
// step with zero gradients; then, since it cannot know whether the others
// clip, each ClipGradNorm and Step of a training rank inside Join first
// announces itself in a phase all-reduce (kind, maxNorm, normType per
// rank), which the joined rank mirrors: it contributes its shard's part
// of the norm and steps its shard, and all-gathers its updated pieces as
// usual. Gradients are averaged over the ranks still training. Every rank
// therefore ends Join with the same parameters, and no final broadcast is
// needed.

import (
	"context"
	"errors"
	"fmt"
	"github.com/cohortml/cohort/internal/dp/shard"
	"github.com/cohortml/cohort/internal/dp/wrapcore"

	"github.com/cohortml/cohort/distributed"
	"github.com/cohortml/cohort/optim"
)

// Phases a training rank announces inside Join.
const (
	phaseClip = 1
	phaseStep = 2
)

// joinState is the Join bookkeeping of one rank.
type joinState struct {
	active int  // ranks training in the latest round that had any
	broken bool // a round failed: no further rounds
}

// Join runs body, this rank's training loop, in uneven-input mode and
// returns once every rank's body has returned. While other ranks still
// train after this rank's body returns, this rank shadows their steps:
// zero gradients into the reductions, its part of the clipping norm, its
// shard's optimizer step and all-gather. Each step's gradients are
// averaged over the ranks that still train. Afterwards every rank holds
// the same parameters (buffers are not synchronised at the end).
//
// Every rank must call Join around the same loop; inside it every Call or
// Forward is a round (evaluate through Module() instead), and every
// ClipGradNorm and Step announces itself to the joined ranks. If body
// returns an error between steps, the others fail in their next round
// with an error naming this rank.
func (m *Model) Join(ctx context.Context, body func() error) error {
	if m.join != nil {
		return errors.New("zero: Join: already inside Join")
	}
	if err := m.core.Usable("Join"); err != nil {
		return err
	}
	m.join = &joinState{active: m.world}
	defer func() { m.join = nil }()
	return wrapcore.RunJoin(ctx, "zero", m.red, &m.join.broken, m.round, body, func(wrapcore.JoinRound) error {
		return m.shadowStep(ctx)
	})
}

// round runs one join round with this rank's state.
func (m *Model) round(ctx context.Context, state int64) (wrapcore.JoinRound, error) {
	r, err := wrapcore.Round(ctx, "zero", m.pg, state, &m.join.broken)
	if len(r.Active) > 0 {
		m.join.active = len(r.Active)
	}
	return r, err
}

// phase runs one phase all-reduce: a training rank announces kind (with
// the clipping arguments), a joined rank passes kind 0 and learns what the
// training ranks do next.
func (m *Model) phase(ctx context.Context, kind int, maxNorm, normType float64) (int, float64, float64, error) {
	v := make([]float64, 3*m.world)
	if kind != 0 {
		v[3*m.rank], v[3*m.rank+1], v[3*m.rank+2] = float64(kind), maxNorm, normType
	}
	if err := m.pg.AllReduce(ctx, distributed.F64(v), distributed.Sum).Wait(); err != nil {
		m.join.broken = true
		return 0, 0, 0, fmt.Errorf("zero: Join: phase all-reduce: %w", err)
	}
	first := -1
	for r := range m.world {
		if v[3*r] == 0 {
			continue
		}
		if first < 0 {
			first = r
			continue
		}
		if v[3*r] != v[3*first] || v[3*r+1] != v[3*first+1] || v[3*r+2] != v[3*first+2] {
			m.join.broken = true
			return 0, 0, 0, fmt.Errorf("zero: Join: ranks %d and %d disagree on the step: %s vs %s", first, r, phaseString(v[3*first:3*first+3]), phaseString(v[3*r:3*r+3]))
		}
	}
	if first < 0 {
		m.join.broken = true
		return 0, 0, 0, errors.New("zero: Join: a phase with no training rank")
	}
	return int(v[3*first]), v[3*first+1], v[3*first+2], nil
}

func phaseString(p []float64) string {
	if p[0] == phaseClip {
		return fmt.Sprintf("ClipGradNorm(%v, %v)", p[1], p[2])
	}
	return "Step"
}

// shadowStep mirrors one synchronised step of the training ranks.
func (m *Model) shadowStep(ctx context.Context) error {
	if !m.o.NoBroadcastBuffers && len(m.buffers) > 0 {
		if err := m.broadcast(ctx, false); err != nil {
			return fmt.Errorf("zero: Join: buffer broadcast from rank 0: %w", err)
		}
	}
	m.ZeroGrad()
	for _, s := range m.scratch {
		clear(s)
	}
	m.ctx = ctx
	m.red.Arm(true, true)
	m.red.StartAll()
	if _, _, err := m.red.Finish(); err != nil {
		return err
	}
	m.averageOverActive()
	for {
		kind, maxNorm, normType, err := m.phase(ctx, 0, 0, 0)
		if err != nil {
			return err
		}
		if kind == phaseStep {
			return m.step(ctx)
		}
		m.settleGrads()
		if _, err := shard.ClipShardNorm(ctx, "zero", m.pg, m.shard, maxNorm, normType); err != nil && !errors.Is(err, optim.ErrNonFiniteNorm) {
			return err
		}
	}
}

// averageOverActive turns the step's average over the world into one
// over the ranks that trained (joined ranks contributed zeros).
func (m *Model) averageOverActive() {
	if m.join == nil || m.join.active == m.world || m.join.active == 0 {
		return
	}
	c := float32(m.world) / float32(m.join.active)
	m.settleGrads()
	for _, g := range [][]float32{m.flatGrad, m.shardGrad} {
		for i := range g {
			g[i] *= c
		}
	}
}
