package fsdp

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/cohortml/cohort/autograd"
	"github.com/cohortml/cohort/distributed"
	"github.com/cohortml/cohort/internal/dp/reducer"
	"github.com/cohortml/cohort/internal/dp/shard"
	"github.com/cohortml/cohort/internal/dp/wrapcore"
	"github.com/cohortml/cohort/nn"
	"github.com/cohortml/cohort/optim"
	"github.com/cohortml/cohort/tensor"
)

// NamedParameters implements nn.Module: the module's parameters (between
// steps the sharded ones hold no values; see FullStateDict).
func (m *Model) NamedParameters() []nn.NamedParameter { return m.module.NamedParameters() }

// NamedBuffers implements nn.Module.
func (m *Model) NamedBuffers() []nn.NamedBuffer { return m.module.NamedBuffers() }

// SetTraining implements nn.Module.
func (m *Model) SetTraining(on bool) { m.module.SetTraining(on) }

// Unwrap returns the wrapped module.
func (m *Model) Unwrap() nn.Module { return m.module }

// Plan returns the shard plan (bucket k is unit len(units)−1−k; the last
// bucket is the root).
func (m *Model) Plan() Plan { return m.plan }

// Shard returns this rank's parameter pieces, the variables its optimizer
// steps.
func (m *Model) Shard() []nn.NamedParameter { return m.shard }

// Optimizer returns this rank's shard optimizer.
func (m *Model) Optimizer() optim.Optimizer { return m.opt }

// Close removes the gradient hooks. It is idempotent.
func (m *Model) Close() error { return m.core.Close() }

// NoSync runs fn with gradient synchronisation off: gradients accumulate
// locally, in full, until the next synchronised Backward.
func (m *Model) NoSync(fn func() error) error { return m.core.NoSync(fn) }

// Call runs forward, a forward pass through the wrapped module that runs
// each unit through Units.Run, with the root unit's parameters gathered
// for the whole pass and each unit's gathered just in time (the next one
// prefetched). When it returns every parameter's Value is a placeholder
// again; the root stays gathered, and the last two units stay in their
// slots, for the backward pass, which gathers the other units again (see
// gather.go). Each Call's backward pass must run before the next Call.
func (m *Model) Call(ctx context.Context, forward func(u *Units) *autograd.Var) (*autograd.Var, error) {
	if err := m.core.Usable("Call"); err != nil {
		return nil, err
	}
	if m.red.InFlight() {
		return nil, errors.New("fsdp: Call: the previous backward pass was not finished with Backward")
	}
	m.ctx = ctx
	m.gen++
	m.inBack = false
	clear(m.ready)
	clear(m.entered)
	m.nReady = 0
	m.heldPeak = 0
	m.account()
	root := len(m.units) - 1
	if err := m.startGather(ctx, root); err != nil {
		return nil, err
	}
	if !m.o.NoPrefetch && len(m.units) > 1 {
		if err := m.startGather(ctx, 0); err != nil {
			m.dropGathered()
			return nil, err
		}
	}
	if err := m.hold(ctx, root); err != nil {
		m.dropGathered()
		return nil, err
	}
	us := &Units{m: m, ctx: ctx}
	m.red.Arm(!m.core.Syncless, false)
	for _, ids := range m.units[:root] { // armed as each unit's backward begins
		for _, i := range ids {
			m.params[i].Param.Grad, m.views[i] = nil, nil
		}
	}
	if !m.core.Syncless {
		m.armBucket(m.bucketOfUnit(root))
	}
	out := forward(us)
	for u := range m.units {
		m.release(u)
	}
	if us.err != nil {
		m.dropGathered()
		m.red.Disarm()
		return nil, us.err
	}
	return out, nil
}

// Backward runs autograd's backward pass from loss and, in a synchronised
// step, completes the reduce-scatter of every unit's gradients: this
// rank's shard variables then hold their averaged gradient pieces.
func (m *Model) Backward(ctx context.Context, loss *autograd.Var) error {
	if err := m.core.BeginBackward("fsdp: Backward: no Call since the last Backward"); err != nil {
		return err
	}
	m.ctx = ctx
	autograd.Backward(loss)
	m.dropGathered() // parameters that received no gradient kept them
	return m.core.EndBackward(m.finish)
}

// onReady runs from autograd when parameter i's gradient is final.
func (m *Model) onReady(i int) {
	p := m.params[i].Param
	if u := m.unitOf[i]; u >= 0 && u < len(m.units)-1 && !m.entered[u] {
		m.core.SetErr(m.outside(i, "it received its gradient although the backward pass never reached the unit"))
	}
	if m.red.Armed() && !m.red.Syncing() {
		// NoSync: keep the sum locally, the parameter holds no shape.
		if g := p.Grad; g != nil && g.Len() == m.plan.Numel[i] {
			if m.stash[i] == nil {
				m.stash[i] = g.Contiguous()
			} else {
				tensor.AddScaled(m.stash[i], 1, g.Reshape(m.stash[i].Shape()...))
			}
		}
		p.Grad = nil
	}
	if m.core.Ready(i) {
		m.core.SetErr(m.finish())
	}
	m.gradReady(i)
}

// finish completes the armed step.
func (m *Model) finish() error { return m.core.Finish(m.o.FindUnusedParameters, nil) }

func (m *Model) stepCtx() context.Context {
	if m.ctx == nil {
		return context.Background()
	}
	return m.ctx
}

// reducerIO is the Model seen as the reducer's I/O.
type reducerIO Model

// Take implements reducer.IO: the gradient (plus any NoSync sum) goes into
// the bucket's scratch buffer and the parameter's Grad is dropped.
func (io *reducerIO) Take(i int, used bool) error {
	m := (*Model)(io)
	p := m.params[i].Param
	k := m.red.BucketOf(i)
	b := m.plan.Buckets[k]
	if m.scratch[k] == nil {
		m.scratch[k] = m.bufs.Get(b.End - b.Start)
	}
	off, n := m.plan.Offset[i]-b.Start, m.plan.Numel[i]
	slot := m.scratch[k][off : off+n]
	if v := m.views[i]; v != nil && p.Grad == v {
		if !p.GradWritten() {
			clear(slot) // no gradient came: the view holds what the buffer held
		}
		return nil // autograd accumulated into the bucket
	}
	defer func() { p.Grad, m.stash[i] = nil, nil }()
	switch g := p.Grad; {
	case g == nil || (g.Len() == 0 && n != 0): // no contribution
		clear(slot)
	case g.Len() != n:
		return fmt.Errorf("fsdp: parameter %q: gradient has %d elements, parameter %d", m.params[i].Name, g.Len(), n)
	default:
		copy(slot, g.Contiguous().Data())
	}
	if s := m.stash[i]; s != nil {
		for j, v := range s.Data() {
			slot[j] += v
		}
	}
	return nil
}

// Start implements reducer.IO: reduce-scatter into this rank's shard.
func (io *reducerIO) Start(k int) reducer.Handle {
	m := (*Model)(io)
	b := m.plan.Buckets[k]
	at := m.plan.ShardOffset(k)
	out := m.shardGrad[at : at+b.Shard]
	in := m.scratch[k] // nil: none taken, zeros
	m.scratch[k] = nil
	for _, i := range b.Params { // the step's full gradients are dropped
		m.params[i].Param.Grad, m.views[i] = nil, nil
	}
	dst := m.plan.ReduceDst(k, out, m.gradUnset) // added to out afterwards unless the same
	h := wrapcore.Reduction{Pkg: "fsdp", Op: "reduce-scatter", Bucket: k, N: b.End - b.Start, After: func() {
		wrapcore.Accumulate(out, dst)
	}}
	return m.bufs.ReduceScatter(m.stepCtx(), m.pg, h, dst, in, b.End-b.Start)
}

// Agree implements reducer.IO (fsdp never rebuilds its buckets).
func (io *reducerIO) Agree(order []int) ([]int, error) { return order, nil }

// Replan implements reducer.IO; it is never called.
func (io *reducerIO) Replan([]int) ([][]int, error) {
	return nil, errors.New("fsdp: buckets cannot be rebuilt")
}

// ZeroGrad clears the gradient shards and any NoSync sums. The shards are
// not cleared at once: the next synchronised backward pass writes over
// them (no pass over the memory), and ClipGradNorm and Step before that
// find them shard. Until then the shard variables' Grads (Shard) hold no
// gradient, as PyTorch's zero_grad(set_to_none=True) leaves none.
func (m *Model) ZeroGrad() {
	for k := range m.gradUnset {
		m.gradUnset[k] = true
	}
	for i := range m.stash {
		m.stash[i] = nil
	}
}

// settleGrads clears the gradient shards of the buckets that received no
// gradient since ZeroGrad, before something reads them.
func (m *Model) settleGrads() { m.plan.ClearShards(m.shardGrad, m.gradUnset) }

// ClipGradNorm scales the gradient shards so that the whole gradient's
// norm is at most maxNorm (shard.ClipShardNorm); every rank must call it.
func (m *Model) ClipGradNorm(ctx context.Context, maxNorm, normType float64) (float64, error) {
	m.settleGrads()
	return shard.ClipShardNorm(ctx, "fsdp", m.pg, m.shard, maxNorm, normType)
}

// Step runs this rank's shard optimizer. With Options.PrefetchAcrossSteps
// it then starts gathering the root and the first unit for the next Call,
// which the rest of the loop (zeroing, loading the next batch) overlaps;
// otherwise nothing is communicated and nothing gathered is held between
// steps. Call gathers the units as it reaches them.
func (m *Model) Step(ctx context.Context) error {
	if err := m.core.BeginStep(); err != nil {
		return err
	}
	m.dropGathered() // nothing is held between steps; drop a stale prefetch
	m.settleGrads()
	m.opt.Step()
	if m.o.PrefetchAcrossSteps && !m.o.NoPrefetch {
		m.heldPeak = 0
		if err := m.startGather(ctx, len(m.units)-1); err != nil {
			return err
		}
		if len(m.units) > 1 {
			if err := m.startGather(ctx, 0); err != nil {
				return err
			}
		}
	}
	return nil
}

// Memory reports this rank's resident training state: ParamBytes is the
// parameter shard plus any gathered unit holding values now (none between
// steps), GradBytes the gradient shard plus NoSync sums (and unit
// gradients armed now), BufferBytes the gathered-parameter and gradient
// buffers kept for reuse.
func (m *Model) Memory() Memory {
	mem := Memory{ParamBytes: 4 * int64(len(m.shardParam)), GradBytes: 4 * int64(len(m.shardGrad)), BufferBytes: m.bufs.HeldBytes()}
	gathered := func(buf []float32, holds bool) {
		if holds {
			mem.ParamBytes += 4 * int64(len(buf))
		} else {
			mem.BufferBytes += 4 * int64(len(buf))
		}
	}
	gathered(m.rootBuf, m.gt.root)
	for s, buf := range m.slots {
		gathered(buf, m.gt.unit[s] >= 0)
	}
	for _, s := range m.scratch { // armed for a step now
		mem.GradBytes += 4 * int64(len(s))
	}
	for i, np := range m.params {
		if m.plan.Offset[i] < 0 {
			mem.ParamBytes += 4 * int64(np.Param.Value.Len())
		}
		if s := m.stash[i]; s != nil {
			mem.GradBytes += 4 * int64(s.Len())
		}
	}
	mem.OptimizerBytes = shard.OptimizerBytes(m.opt)
	return mem
}

// PeakGatheredBytes returns the most gathered (full) parameter bytes the
// Model held at once since the last Call began (its forward and backward
// passes): the root and two slots, each as large as the largest unit of
// its parity (the current unit and the prefetched next).
func (m *Model) PeakGatheredBytes() int64 { return m.heldPeak }

// targets lists this rank's pieces (and replicated tensors) as load targets.
func (m *Model) targets() []shard.ShardTarget {
	var ts []shard.ShardTarget
	for j, pc := range m.pieces {
		ts = append(ts, shard.ShardTarget{Name: m.params[pc.Param].Name, Shape: m.shapes[pc.Param], Lo: pc.Lo, Data: m.shard[j].Param.Value.Data()})
	}
	for i, np := range m.params {
		if m.plan.Offset[i] < 0 {
			ts = append(ts, shard.ShardTarget{Name: np.Name, Shape: m.shapes[i], Data: np.Param.Value.Data()})
		}
	}
	for _, nb := range m.module.NamedBuffers() {
		ts = append(ts, shard.ShardTarget{Name: nb.Name, Shape: nb.Buffer.Shape(), Data: nb.Buffer.Data()})
	}
	return ts
}

// ShardedStateDict returns this rank's part of the model state: its
// parameter pieces (aliasing the live shard) and, replicated, frozen
// parameters and buffers. No communication.
func (m *Model) ShardedStateDict() []ShardedTensor {
	var out []ShardedTensor
	for _, t := range m.targets() {
		out = append(out, ShardedTensor{Name: t.Name, Shape: t.Shape, Offset: t.Lo, Data: t.Data, Replicated: m.plan.Offset[m.indexOf(t.Name)] < 0})
	}
	return out
}

func (m *Model) indexOf(name string) int {
	for i, np := range m.params {
		if np.Name == name {
			return i
		}
	}
	return -1
}

// LoadShardedStateDict loads entries saved at any world size (all saved
// ranks' entries together, or FullEntries of a full state dict) into
// this rank's shard. Errors name the key; nothing changes on an error.
func (m *Model) LoadShardedStateDict(entries []ShardedTensor) error {
	m.dropGathered() // a prefetch of the old values
	ts := m.targets()
	keys := map[string]bool{}
	for _, np := range m.params {
		keys[np.Name] = true
	}
	for _, nb := range m.module.NamedBuffers() {
		keys[nb.Name] = true
	}
	if err := shard.CheckKeys(keys, entries); err != nil {
		return fmt.Errorf("fsdp: %w", err)
	}
	if err := shard.LoadShards(ts, entries); err != nil {
		return fmt.Errorf("fsdp: %w", err)
	}
	return nil
}

// FullStateDict all-gathers the parameters and returns the full state
// dict (nn state-dict keys, fresh tensors) on every rank. Every rank must
// call it at the same point, between steps.
func (m *Model) FullStateDict(ctx context.Context) (map[string]*tensor.Tensor, error) {
	sd := map[string]*tensor.Tensor{}
	for k, b := range m.plan.Buckets {
		full := make([]float32, b.End-b.Start)
		at := m.plan.ShardOffset(k)
		in := m.shardParam[at : at+b.Shard]
		if m.world == 1 {
			copy(full, in)
		} else if err := m.pg.AllGather(ctx, distributed.F32(full), distributed.F32(slices.Clone(in))).Wait(); err != nil {
			return nil, fmt.Errorf("fsdp: FullStateDict: all-gather of bucket %d: %w", k, err)
		}
		for _, i := range b.Params {
			off := m.plan.Offset[i] - b.Start
			sd[m.params[i].Name] = tensor.FromSlice(slices.Clone(full[off:off+m.plan.Numel[i]]), m.shapes[i]...)
		}
	}
	for i, np := range m.params {
		if m.plan.Offset[i] < 0 {
			sd[np.Name] = np.Param.Value.Clone()
		}
	}
	for _, nb := range m.module.NamedBuffers() {
		sd[nb.Name] = nb.Buffer.Clone()
	}
	return sd, nil
}

// OptimizerShards returns this rank's optimizer state as sharded-state
// entries that load at any world size (shard.OptimizerShards).
func (m *Model) OptimizerShards() []ShardedTensor {
	return shard.OptimizerShards(m.opt, m.shard, m.pieces, m.shapes)
}

// LoadOptimizerShards loads optimizer state saved by OptimizerShards at
// any world size (every saved rank's entries together).
func (m *Model) LoadOptimizerShards(entries []ShardedTensor) error {
	if err := shard.LoadOptimizerShards(m.opt, m.shard, m.pieces, m.shapes, entries); err != nil {
		return fmt.Errorf("fsdp: %w", err)
	}
	return nil
}

// armBucket gives bucket k of a synchronised step a scratch buffer and
// makes its parameters' Grads views of it, so that autograd accumulates
// straight into the buffer that is reduce-scattered (NoSync sums are
// carried in). The root's bucket is armed by Call, a unit's as its
// backward begins. Start drops the bucket's buffer and views.
func (m *Model) armBucket(k int) {
	b := m.plan.Buckets[k]
	// The buffer is not zeroed: each parameter's first gradient is
	// written over its view (autograd.Var.SetGradBuffer), and Take clears
	// the view of one that received none. A buffer still here from an
	// earlier Call was never reduced (that Call had no backward pass: an
	// evaluation): what it holds is stale.
	if m.scratch[k] == nil {
		m.scratch[k] = m.bufs.GetDirty(b.End - b.Start)
		m.plan.ClearPadding(k, m.scratch[k])
	}
	for _, i := range b.Params {
		off, n := m.plan.Offset[i]-b.Start, m.plan.Numel[i]
		v := tensor.FromSlice(m.scratch[k][off:off+n], m.shapes[i]...)
		p := m.params[i].Param
		if s := m.stash[i]; s != nil {
			copy(v.Data(), s.Data()) // accumulated under NoSync
			m.stash[i] = nil
			p.Grad = v
		} else {
			p.SetGradBuffer(v)
		}
		m.views[i] = v
	}
}
