package zero

import (
	"context"
	"fmt"
	"github.com/cohortml/cohort/internal/dp/shard"
	"os"
	"strconv"
	"strings"

	"github.com/cohortml/cohort/distributed"
	"github.com/cohortml/cohort/internal/dp/reducer"
	"github.com/cohortml/cohort/internal/dp/wrapcore"
	"github.com/cohortml/cohort/tensor"
)

// reducerIO is the Model seen as the reducer's I/O.
type reducerIO Model

// Take implements reducer.IO: it brings parameter i's gradient into its
// bucket (Stage1: the flat gradient buffer the Grad is a view of; Stage2:
// the bucket's scratch buffer, releasing the Grad).
func (io *reducerIO) Take(i int, used bool) error {
	m := (*Model)(io)
	p := m.params[i].Param
	off, n := m.plan.Offset[i], m.plan.Numel[i]
	var slot []float32
	if m.o.Stage == Stage1 {
		slot = m.flatGrad[off : off+n]
		if p.Grad == m.views[i] {
			return nil
		}
		defer func() { p.Grad = m.views[i] }()
	} else {
		k := m.red.BucketOf(i)
		b := m.plan.Buckets[k]
		if m.scratch[k] == nil {
			m.scratch[k] = m.bufs.Get(b.End - b.Start)
		}
		slot = m.scratch[k][off-b.Start : off-b.Start+n]
		if v := m.views[i]; v != nil && p.Grad == v {
			if !p.GradWritten() {
				clear(slot) // no gradient came: the view holds what the buffer held
			}
			return nil // autograd accumulated into the bucket
		}
	}
	switch {
	case p.Grad == nil:
		clear(slot)
	case p.Grad.Len() != n:
		return fmt.Errorf("zero: parameter %q: gradient has shape %v, parameter %v", m.params[i].Name, p.Grad.Shape(), p.Value.Shape())
	default:
		copy(slot, p.Grad.Contiguous().Data())
	}
	return nil
}

// Start implements reducer.IO: an averaging all-reduce of the bucket
// (Stage1) or reduce-scatter into this rank's gradient shard (Stage2).
func (io *reducerIO) Start(k int) reducer.Handle {
	m := (*Model)(io)
	b := m.plan.Buckets[k]
	ctx := m.stepCtx()
	if m.o.Stage == Stage1 {
		h := wrapcore.Reduction{Pkg: "zero", Op: "all-reduce", Bucket: k, N: b.End - b.Start}
		if m.world > 1 {
			h.Work = m.pg.AllReduce(ctx, distributed.F32(m.flatGrad[b.Start:b.End]), distributed.Avg)
		}
		return h
	}
	at := m.plan.ShardOffset(k)
	out := m.shardGrad[at : at+b.Shard]
	in := m.scratch[k] // nil: a bucket without parameters taken (shadow), zeros
	m.scratch[k] = nil
	dst := m.plan.ReduceDst(k, out, m.gradUnset) // added to out afterwards unless the same
	h := wrapcore.Reduction{Pkg: "zero", Op: "reduce-scatter", Bucket: k, N: b.End - b.Start, After: func() {
		for _, i := range b.Params { // the step's full gradients are gone
			m.params[i].Param.Grad, m.views[i] = nil, nil
		}
		wrapcore.Accumulate(out, dst)
	}}
	return m.bufs.ReduceScatter(ctx, m.pg, h, dst, in, b.End-b.Start)
}

// Agree implements reducer.IO; zero never rebuilds its buckets (the
// optimizer state is laid out along them).
func (io *reducerIO) Agree(order []int) ([]int, error) { return order, nil }

// Replan implements reducer.IO; it is never called.
func (io *reducerIO) Replan([]int) ([][]int, error) {
	return nil, fmt.Errorf("zero: buckets cannot be rebuilt")
}

// ZeroGrad clears every gradient the Model keeps: the shard gradients
// and, under Stage1, the full gradient buffer (Stage2 drops the
// parameters' Grads). Use it instead of the shard optimizer's ZeroGrad.
//
// Under Stage2 the shard gradients are not cleared at once: the next
// synchronised backward pass writes over them (no pass over the memory),
// and ClipGradNorm and Step before that find them zero. Until then the
// shard variables' Grads (Shard) hold no gradient, as PyTorch's
// zero_grad(set_to_none=True) leaves none.
func (m *Model) ZeroGrad() {
	clear(m.flatGrad)
	for k := range m.gradUnset {
		m.gradUnset[k] = true
	}
	if m.o.Stage == Stage2 {
		for _, np := range m.params {
			np.Param.Grad = nil
		}
	}
}

// settleGrads clears the gradient shards of the buckets that received no
// gradient since ZeroGrad, before something reads them.
func (m *Model) settleGrads() { m.plan.ClearShards(m.shardGrad, m.gradUnset) }

// ClipGradNorm scales the averaged gradient shards so that the norm of the
// whole (unsharded) gradient is at most maxNorm, and returns that norm
// before scaling, as optim.ClipGradNorm does on full gradients. normType
// is 2 or math.Inf(1). Every rank must call it at the same point, after
// Backward: it all-gathers one float64 per rank.
func (m *Model) ClipGradNorm(ctx context.Context, maxNorm, normType float64) (float64, error) {
	m.settleGrads()
	if m.join != nil {
		if err := shard.CheckClip("zero", maxNorm, normType); err != nil {
			return 0, err
		}
		if _, _, _, err := m.phase(ctx, phaseClip, maxNorm, normType); err != nil {
			return 0, err
		}
	}
	return shard.ClipShardNorm(ctx, "zero", m.pg, m.shard, maxNorm, normType)
}

// Step runs the shard optimizer's step, then all-gathers the updated
// shards so that every rank holds the full updated parameters. The update
// runs bucket by bucket, each bucket's all-gather starting while the next
// is updated (the optimizer steps only variables with a gradient, and
// updates are elementwise: the bits equal one whole step). Every rank
// must call it at the same point; it returns when every all-gather is done.
func (m *Model) Step(ctx context.Context) error {
	if err := m.core.BeginStep(); err != nil {
		return err
	}
	if m.join != nil {
		if _, _, _, err := m.phase(ctx, phaseStep, 0, 0); err != nil {
			return err
		}
	}
	return m.step(ctx)
}

// step updates this rank's shard and all-gathers every bucket.
func (m *Model) step(ctx context.Context) error {
	m.settleGrads()
	m.steps++
	if m.world == 1 || len(m.plan.Buckets) == 1 {
		m.opt.Step()
		return m.gather(ctx, -1)
	}
	grads := make([]*tensor.Tensor, len(m.shard))
	for j, s := range m.shard {
		grads[j] = s.Param.Grad
	}
	defer func() {
		for j, s := range m.shard {
			s.Param.Grad = grads[j]
		}
	}()
	works := make([]distributed.Work, len(m.plan.Buckets))
	for k := range m.plan.Buckets {
		for j, pc := range m.pieces {
			m.shard[j].Param.Grad = nil
			if pc.Bucket == k {
				m.shard[j].Param.Grad = grads[j]
			}
		}
		m.opt.Step()
		works[k] = m.startGather(ctx, k)
	}
	return m.wait(works)
}

// gather all-gathers bucket k's updated shards, or every bucket's for
// k < 0, and waits.
func (m *Model) gather(ctx context.Context, k int) error {
	if m.world == 1 {
		return nil
	}
	works := make([]distributed.Work, len(m.plan.Buckets))
	for j := range m.plan.Buckets {
		if k < 0 || j == k {
			works[j] = m.startGather(ctx, j)
		}
	}
	return m.wait(works)
}

// startGather starts all-gathering bucket k's shards into the flat
// parameter buffer (nil in a group of one). The gather runs in place: this
// rank's shard is already in its slot of the bucket.
func (m *Model) startGather(ctx context.Context, k int) distributed.Work {
	if m.world == 1 {
		return nil
	}
	b := m.plan.Buckets[k]
	lo, hi := b.ShardRange(m.rank)
	return m.pg.AllGather(ctx, distributed.F32(m.flatParam[b.Start:b.End]), distributed.F32(m.flatParam[lo:hi]))
}

// wait waits for every started all-gather and returns the first error.
func (m *Model) wait(works []distributed.Work) error {
	var first error
	for k, w := range works {
		if w == nil {
			continue
		}
		if err := w.Wait(); err != nil && first == nil {
			first = fmt.Errorf("zero: Step: all-gather of bucket %d's parameters: %w", k, err)
		}
	}
	return first
}

// Memory reports this rank's resident training state.
func (m *Model) Memory() Memory {
	var mem Memory
	mem.ParamBytes = 4 * int64(len(m.flatParam))
	for i, np := range m.params {
		if m.plan.Offset[i] < 0 {
			mem.ParamBytes += 4 * int64(np.Param.Value.Len())
		}
		if m.o.Stage == Stage2 && np.Param.Grad != nil {
			mem.GradBytes += 4 * int64(np.Param.Grad.Len())
		}
	}
	mem.GradBytes += 4 * int64(len(m.flatGrad)+len(m.shardGrad))
	for _, s := range m.scratch { // armed for a step now
		mem.GradBytes += 4 * int64(len(s))
	}
	mem.BufferBytes = m.bufs.HeldBytes()
	mem.OptimizerBytes = shard.OptimizerBytes(m.opt)
	return mem
}

// PeakRSSBytes returns this process's peak resident set size (VmHWM on
// Linux), or an error where it cannot be read.
func PeakRSSBytes() (int64, error) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, fmt.Errorf("zero: peak RSS: %w", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			f := strings.Fields(v)
			if len(f) >= 1 {
				kb, err := strconv.ParseInt(f[0], 10, 64)
				if err != nil {
					return 0, fmt.Errorf("zero: peak RSS: %q: %w", line, err)
				}
				return kb << 10, nil
			}
		}
	}
	return 0, fmt.Errorf("zero: peak RSS: no VmHWM in /proc/self/status")
}
