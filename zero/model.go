package zero

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

// Model is a module trained data-parallel with sharded optimizer state
// (Stage1) and gradients (Stage2). Create it with Wrap; drive it from one
// goroutine: Call (or Forward), Backward, optionally ClipGradNorm, Step,
// ZeroGrad.
//
// Between steps every rank holds the full parameters; the module's
// parameter Values are views into one flat buffer laid out by Plan.
type Model struct {
	module      nn.Module
	layer       nn.Layer
	pg          distributed.ProcessGroup
	o           Options
	rank, world int

	params  []nn.NamedParameter
	buffers []nn.NamedBuffer
	plan    Plan
	pieces  []Piece
	shard   []nn.NamedParameter // this rank's pieces as Vars
	opt     optim.Optimizer
	red     *reducer.Reducer
	core    wrapcore.Core // hooks, their error, NoSync, finishing a step

	// Invariants: len(flatParam) == plan.Len(); every parameter's Value is
	// a view of its slot. Stage1: len(flatGrad) == plan.Len() and every
	// trainable parameter's Grad is a view of its slot. Stage2: flatGrad
	// is nil; shardGrad holds this rank's gradient shards in bucket order
	// and scratch[k] the full gradient of bucket k while it is reduced.
	flatParam []float32
	flatGrad  []float32
	shardGrad []float32
	// gradUnset[k] (Stage2): bucket k's gradient shard holds no gradient
	// since ZeroGrad, whatever its contents; the next reduce-scatter
	// writes over it, and a reader before that clears it (settleGrads).
	gradUnset []bool
	scratch   [][]float32
	bufs      wrapcore.Buffers // Stage2: bucket buffers kept for the next step
	views     []*tensor.Tensor // the Grad each parameter should have (Stage2: during a synchronised step)

	join  *joinState // inside Join
	ctx   context.Context
	steps int64
}

var _ nn.Module = (*Model)(nil)

// Vars returns the variables of named parameters, in order.
func Vars(ps []nn.NamedParameter) []*autograd.Var {
	out := make([]*autograd.Var, len(ps))
	for i, p := range ps {
		out[i] = p.Param
	}
	return out
}

// Wrap shards model's training state across pg. It checks that every rank
// holds the same model (wrapcore.CheckSameModel, as ddp's: a mismatch names the rank and
// the first differing parameter), copies rank 0's parameters and buffers
// to every rank, lays the trainable parameters out in buckets (reverse
// registration order, ddp's caps) sharded equally across the ranks, and
// builds this rank's optimizer with o.Optimizer over its shard. Every rank
// must call Wrap at the same point; it blocks until done.
func Wrap(ctx context.Context, model nn.Module, pg distributed.ProcessGroup, o Options) (*Model, error) {
	if model == nil || pg == nil {
		return nil, errors.New("zero: Wrap: nil model or process group")
	}
	if err := o.validate(); err != nil {
		return nil, err
	}
	m := &Model{module: model, pg: pg, o: o, rank: pg.Rank(), world: pg.Size()}
	m.layer, _ = model.(nn.Layer)
	m.params, m.buffers = model.NamedParameters(), model.NamedBuffers()
	if err := wrapcore.HostOnly("zero", m.params, m.buffers); err != nil {
		return nil, err
	}
	if err := wrapcore.CheckSameModel(ctx, "zero", pg, m.params, m.buffers); err != nil {
		return nil, fmt.Errorf("zero: %w", err)
	}
	numel := make([]int, len(m.params))
	var order []int
	for i, np := range m.params {
		numel[i] = np.Param.Value.Len()
		if np.Param.RequiresGrad() {
			order = append(order, i)
		}
	}
	slices.Reverse(order)
	bp, err := reducer.PlanBuckets(numel, order, o.FirstBucketCapBytes, o.BucketCapBytes)
	if err != nil {
		return nil, fmt.Errorf("zero: %w", err)
	}
	buckets := make([][]int, len(bp.Buckets))
	for k, b := range bp.Buckets {
		buckets[k] = b.Params
	}
	if m.plan, err = PlanShards(numel, buckets, m.world); err != nil {
		return nil, err
	}
	if err := m.layout(); err != nil {
		return nil, err
	}
	if err := m.broadcast(ctx, true); err != nil {
		return nil, fmt.Errorf("zero: Wrap: broadcast from rank 0: %w", err)
	}
	if m.red, err = reducer.New(len(m.params), buckets, (*reducerIO)(m), true); err != nil {
		return nil, fmt.Errorf("zero: Wrap: %w", err)
	}
	if m.opt, err = shard.BuildOptimizer("zero", o.Optimizer, m.params, m.shapes(), m.shard, m.rank, "; build it from every shard parameter Options.Optimizer receives"); err != nil {
		return nil, err
	}
	m.core = wrapcore.Core{Pkg: "zero", Params: m.params, Red: m.red}
	m.core.Hook(m.onReady)
	return m, nil
}

// layout moves the parameters into the flat buffer and creates the shard
// variables.
func (m *Model) layout() error {
	p := m.plan
	m.flatParam = wrapcore.AlignedFloats(p.Len())
	for i, np := range m.params {
		off := p.Offset[i]
		if off < 0 {
			continue // frozen: stays where it is
		}
		v := np.Param.Value
		copy(m.flatParam[off:off+v.Len()], v.Data())
		np.Param.Value = tensor.FromSlice(m.flatParam[off:off+v.Len()], v.Shape()...)
	}
	m.scratch = make([][]float32, len(p.Buckets))
	if m.o.Stage == Stage2 && !m.o.FreeBuffers {
		m.bufs.Limit = p.Len()
	}
	if m.o.Stage == Stage1 {
		m.flatGrad = wrapcore.AlignedFloats(p.Len())
		m.views = make([]*tensor.Tensor, len(m.params))
		for i, np := range m.params {
			off := p.Offset[i]
			if off < 0 {
				continue
			}
			v := tensor.FromSlice(m.flatGrad[off:off+p.Numel[i]], np.Param.Value.Shape()...)
			if np.Param.Grad != nil && np.Param.Grad.Len() == v.Len() {
				copy(v.Data(), np.Param.Grad.Contiguous().Data())
			}
			np.Param.Grad, m.views[i] = v, v
		}
	} else {
		m.shardGrad = wrapcore.AlignedFloats(p.ShardLen())
		m.gradUnset = make([]bool, len(p.Buckets))
		for k := range m.gradUnset {
			m.gradUnset[k] = true // (zero) no gradient yet
		}
		m.views = make([]*tensor.Tensor, len(m.params))
		for _, np := range m.params {
			np.Param.Grad = nil
		}
	}
	m.pieces = p.Pieces(m.rank)
	m.shard = make([]nn.NamedParameter, len(m.pieces))
	for j, pc := range m.pieces {
		v := autograd.NewVar(tensor.FromSlice(m.flatParam[pc.Flat:pc.Flat+pc.Len], pc.Len), true)
		v.Grad = tensor.FromSlice(m.gradOf(pc), pc.Len)
		m.shard[j] = nn.NamedParameter{Name: m.params[pc.Param].Name, Param: v}
	}
	return nil
}

// gradOf returns where piece pc's averaged gradient lives.
func (m *Model) gradOf(pc Piece) []float32 {
	if m.o.Stage == Stage1 {
		return m.flatGrad[pc.Flat : pc.Flat+pc.Len]
	}
	b := m.plan.Buckets[pc.Bucket]
	lo, _ := b.ShardRange(m.rank)
	at := m.plan.ShardOffset(pc.Bucket) + pc.Flat - lo
	return m.shardGrad[at : at+pc.Len]
}

// broadcast copies rank 0's buffers and (with params) flat parameters to
// every rank.
func (m *Model) broadcast(ctx context.Context, params bool) error {
	if m.world == 1 {
		return nil
	}
	if params {
		if err := m.pg.Broadcast(ctx, distributed.F32(m.flatParam), 0).Wait(); err != nil {
			return err
		}
		for i, np := range m.params {
			if m.plan.Offset[i] < 0 { // frozen parameters live outside the flat buffer
				if err := m.pg.Broadcast(ctx, distributed.F32(np.Param.Value.Data()), 0).Wait(); err != nil {
					return err
				}
			}
		}
	}
	for _, nb := range m.buffers {
		if err := m.pg.Broadcast(ctx, distributed.F32(nb.Buffer.Data()), 0).Wait(); err != nil {
			return err
		}
	}
	return nil
}

// Module returns the wrapped module as a Layer, or nil if it is not one.
func (m *Model) Module() nn.Layer { return m.layer }

// Unwrap returns the wrapped module.
func (m *Model) Unwrap() nn.Module { return m.module }

// NamedParameters implements nn.Module: the full parameters.
func (m *Model) NamedParameters() []nn.NamedParameter { return m.module.NamedParameters() }

// NamedBuffers implements nn.Module.
func (m *Model) NamedBuffers() []nn.NamedBuffer { return m.module.NamedBuffers() }

// SetTraining implements nn.Module.
func (m *Model) SetTraining(on bool) { m.module.SetTraining(on) }

// Plan returns the shard plan.
func (m *Model) Plan() Plan { return m.plan }

// Shard returns this rank's parameter pieces, the variables the optimizer
// steps (do not modify the slice).
func (m *Model) Shard() []nn.NamedParameter { return m.shard }

// Optimizer returns this rank's shard optimizer (for an optim.Scheduler,
// or its state dict).
func (m *Model) Optimizer() optim.Optimizer { return m.opt }

// Close removes the gradient hooks. It is idempotent.
func (m *Model) Close() error { return m.core.Close() }

// NoSync runs fn with gradient synchronisation off: gradients accumulate
// locally (in full, on every rank) and the next synchronised Backward
// reduces the sums. Every rank must use NoSync for the same steps.
func (m *Model) NoSync(fn func() error) error { return m.core.NoSync(fn) }

// Forward runs the wrapped Layer's forward pass on x; see Call.
func (m *Model) Forward(ctx context.Context, x *autograd.Var) (*autograd.Var, error) {
	if m.layer == nil {
		return nil, fmt.Errorf("zero: Forward: the wrapped %T is not an nn.Layer; use Call", m.module)
	}
	return m.Call(ctx, func() *autograd.Var { return m.layer.Forward(x) })
}

// Call runs forward, any forward pass through the wrapped module, and arms
// the gradient reduction of the backward pass that follows. A synchronised
// call first broadcasts rank 0's buffers (unless NoBroadcastBuffers).
// The backward pass may run through Backward or plain autograd.Backward:
// when every trainable parameter receives a gradient the step's
// reductions complete inside the last gradient hook.
func (m *Model) Call(ctx context.Context, forward func() *autograd.Var) (*autograd.Var, error) {
	if err := m.core.Usable("Forward"); err != nil {
		return nil, err
	}
	if m.red.InFlight() {
		return nil, errors.New("zero: Forward: the previous backward pass was not finished with Backward (some parameter received no gradient, so it could not complete on its own)")
	}
	if m.join != nil {
		state := int64(wrapcore.JoinSyncing)
		if m.core.Syncless {
			state = wrapcore.JoinNoSync
		}
		if _, err := m.round(ctx, state); err != nil {
			return nil, err
		}
	}
	if !m.core.Syncless && !m.o.NoBroadcastBuffers && len(m.buffers) > 0 {
		if err := m.broadcast(ctx, false); err != nil {
			return nil, fmt.Errorf("zero: Forward: buffer broadcast from rank 0: %w", err)
		}
	}
	m.ctx = ctx
	m.red.Arm(!m.core.Syncless, false)
	if !m.core.Syncless && m.o.Stage == Stage2 {
		m.armViews()
	}
	return forward(), nil
}

// Backward runs autograd's backward pass from loss and, in a synchronised
// step, completes the gradient reduction: afterwards this rank's shard
// parameters hold the averaged gradient of their pieces (and, under
// Stage1, every parameter's Grad holds the full average). The collectives
// of the step are all issued even after an error, so no rank hangs.
func (m *Model) Backward(ctx context.Context, loss *autograd.Var) error {
	if err := m.core.BeginBackward("zero: Backward: no Forward through the Model since the last Backward"); err != nil {
		return err
	}
	m.ctx = ctx
	autograd.Backward(loss)
	return m.core.EndBackward(m.finish)
}

// onReady runs from autograd when parameter i's gradient is final.
func (m *Model) onReady(i int) {
	if m.core.Ready(i) {
		m.core.SetErr(m.finish())
	}
}

// finish completes the armed step.
func (m *Model) finish() error {
	return m.core.Finish(m.o.FindUnusedParameters, m.averageOverActive)
}

func (m *Model) stepCtx() context.Context {
	if m.ctx == nil {
		return context.Background()
	}
	return m.ctx
}

// armViews gives every bucket of a synchronised Stage2 step a buffer
// (kept from the last step unless FreeBuffers) and makes the parameters'
// Grads views of it, so that autograd writes and accumulates straight
// into the buffer that is reduce-scattered (a gradient accumulated under
// NoSync is carried in). Each bucket's buffer and views are dropped once
// its reduce-scatter completes.
func (m *Model) armViews() {
	for k, b := range m.plan.Buckets {
		// The buffer is not zeroed: each parameter's first gradient is
		// written over its view (autograd.Var.SetGradBuffer), and Take
		// clears the view of one that received none. A buffer still here
		// from an earlier Call was never reduced (that Call had no
		// backward pass: an evaluation): what it holds is stale.
		if m.scratch[k] == nil {
			m.scratch[k] = m.bufs.GetDirty(b.End - b.Start)
			m.plan.ClearPadding(k, m.scratch[k])
		}
		for _, i := range b.Params {
			p := m.params[i].Param
			off, n := m.plan.Offset[i]-b.Start, m.plan.Numel[i]
			v := tensor.FromSlice(m.scratch[k][off:off+n], p.Value.Shape()...)
			if g := p.Grad; g != nil && g.Len() == n && (g != m.views[i] || p.GradWritten()) {
				copy(v.Data(), g.Contiguous().Data()) // accumulated under NoSync (perhaps in the view itself)
				p.Grad = v
			} else {
				p.SetGradBuffer(v)
			}
			m.views[i] = v
		}
	}
}
