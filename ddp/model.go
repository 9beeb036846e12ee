package ddp

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/cohortml/cohort/autograd"
	"github.com/cohortml/cohort/distributed"
	"github.com/cohortml/cohort/internal/dp/reducer"
	"github.com/cohortml/cohort/internal/dp/wrapcore"
	"github.com/cohortml/cohort/nn"
	"github.com/cohortml/cohort/tensor"
)

// Model is a module replicated across a process group. Create it with
// Wrap (a Layer) or WrapModule (any Module, with a forward function per
// call); drive it with Forward or Call and Backward from one goroutine.
//
// The bucket bookkeeping (which gradients are ready, which buckets have
// started) is a reducer.Reducer; Model is its I/O: the flat buffer the
// buckets live in, the communication hook, the rebuild broadcast.
type Model struct {
	module      nn.Module
	layer       nn.Layer // module as a Layer, or nil
	pg          distributed.ProcessGroup
	o           Options
	rank, world int
	dev         tensor.Device // where the parameters, buffers and buckets are

	params  []nn.NamedParameter
	buffers []nn.NamedBuffer
	tracked []int         // indices of the parameters that require grad
	core    wrapcore.Core // hooks, their error, NoSync

	// Buckets. Invariant: flat has plan.Len() elements; in view mode
	// views[p] is the Grad parameter p should have.
	plan    Plan
	flat    []float32
	flatDev *tensor.Tensor // the flat buffer when dev is not the CPU (flat is nil)
	buckets []*bucketState
	views   []*tensor.Tensor
	red     *reducer.Reducer
	step    int64 // synchronised steps finished, equal on every rank
	// identity is set when reducing is the identity (one rank, exact
	// all-reduce): gradients then stay where autograd put them.
	identity bool

	// The current step.
	shadow  bool
	divisor int
	ctx     context.Context // the step's context, from Forward or Backward
	bufFlat []float32

	join *joinState

	stats Stats
	cur   stepTimes
	ivs   []interval // recordStep's scratch

	// Tracing (Options.Span): the name of each bucket's span, and the
	// closers of the spans open in this step.
	spanNames []string
	spanEnds  []func()
	// verifiedAt is the step the divergence guard (VerifyEvery) last
	// checked; 0: none yet.
	verifiedAt int64
}

var _ nn.Module = (*Model)(nil)

// bucketState is a bucket at run time.
type bucketState struct {
	b          Bucket
	paramBytes int64
	red        Reduction
}

// Wrap replicates model across pg. It checks that every rank's model has
// the same parameters and buffers (names, shapes, dtypes, which parameters
// are trainable), then copies rank 0's parameters and buffers to every
// rank. Every rank must call Wrap at the same point; it blocks until the
// check and the copy are done. Wrap registers gradient-ready hooks on the
// model's trainable parameters; Close removes them.
func Wrap(ctx context.Context, model nn.Layer, pg distributed.ProcessGroup, o Options) (*Model, error) {
	if model == nil {
		return nil, errors.New("ddp: Wrap: nil model or process group")
	}
	return WrapModule(ctx, model, pg, o)
}

// WrapModule is Wrap for a module without a single-input forward pass
// (a language model's Forward(idx, B, T)): drive it with Call instead of
// Forward. When module is also an nn.Layer, Forward works too.
func WrapModule(ctx context.Context, model nn.Module, pg distributed.ProcessGroup, o Options) (*Model, error) {
	if model == nil || pg == nil {
		return nil, errors.New("ddp: Wrap: nil model or process group")
	}
	if err := o.validate(); err != nil {
		return nil, err
	}
	m := &Model{module: model, pg: pg, o: o, rank: pg.Rank(), world: pg.Size()}
	m.layer, _ = model.(nn.Layer)
	switch o.Hook.(type) {
	case AllReduceHook, *AllReduceHook:
		m.identity = m.world == 1
	}
	m.params = model.NamedParameters()
	m.buffers = model.NamedBuffers()
	var err error
	if m.dev, err = modelDevice(m.params, m.buffers); err != nil {
		return nil, err
	}
	if err := m.checkDevice(); err != nil {
		return nil, err
	}
	if err := CheckSameModel(ctx, pg, m.params, m.buffers); err != nil {
		return nil, err
	}
	if err := m.broadcastState(ctx, 0, true); err != nil {
		return nil, fmt.Errorf("ddp: Wrap: broadcast from rank 0: %w", err)
	}
	for i, np := range m.params {
		if np.Param.RequiresGrad() {
			m.tracked = append(m.tracked, i)
		}
	}
	// Before any step, expect gradients in the reverse of registration order.
	order := slices.Clone(m.tracked)
	slices.Reverse(order)
	buckets, err := m.setPlan(order)
	if err != nil {
		return nil, err
	}
	if m.red, err = reducer.New(len(m.params), buckets, (*reducerIO)(m), false); err != nil {
		return nil, fmt.Errorf("ddp: Wrap: %w", err)
	}
	m.core = wrapcore.Core{Pkg: "ddp", Params: m.params, Red: m.red}
	m.core.Hook(m.onReady)
	return m, nil
}

// Module returns the wrapped module as a Layer (for evaluation, or
// saving), or nil when it was wrapped by WrapModule and is not a Layer;
// Unwrap returns it in every case.
func (m *Model) Module() nn.Layer { return m.layer }

// Unwrap returns the wrapped module.
func (m *Model) Unwrap() nn.Module { return m.module }

// NamedParameters implements nn.Module: the wrapped module's parameters,
// so optimizers can be built from the Model.
func (m *Model) NamedParameters() []nn.NamedParameter { return m.module.NamedParameters() }

// NamedBuffers implements nn.Module.
func (m *Model) NamedBuffers() []nn.NamedBuffer { return m.module.NamedBuffers() }

// SetTraining implements nn.Module.
func (m *Model) SetTraining(training bool) { m.module.SetTraining(training) }

// Plan returns the current bucket plan (rebuilt after the first step).
func (m *Model) Plan() Plan { return m.plan }

// Rank and Size return this rank and the group size.
func (m *Model) Rank() int { return m.rank }
func (m *Model) Size() int { return m.world }

// Close removes the gradient hooks; the module and its gradients stay
// usable. Close is idempotent.
func (m *Model) Close() error { return m.core.Close() }

// NoSync runs fn with gradient synchronisation off: the forward and
// backward passes fn runs through this Model communicate nothing and
// gradients accumulate locally; the next synchronised Backward averages
// the accumulated sums. Every rank must use NoSync for the same steps.
func (m *Model) NoSync(fn func() error) error { return m.core.NoSync(fn) }

// Forward runs the wrapped Layer's forward pass on x; see Call.
func (m *Model) Forward(ctx context.Context, x *autograd.Var) (*autograd.Var, error) {
	if m.layer == nil {
		return nil, fmt.Errorf("ddp: Forward: the wrapped %T is not an nn.Layer; use Call", m.module)
	}
	return m.Call(ctx, func() *autograd.Var { return m.layer.Forward(x) })
}

// Call runs forward, a forward pass through the wrapped module (any
// signature: func() { return gpt.Forward(idx, B, T) }), and prepares the
// gradient reduction of the backward pass that follows. Before a
// synchronised forward it broadcasts rank 0's buffers (unless
// Options.NoBroadcastBuffers); inside Join it first takes part in the
// join round; every Options.VerifyEvery steps it first runs
// VerifyReplicas and returns its error. It blocks on those collectives.
//
// The backward pass may run through Backward, or through plain
// autograd.Backward: when every trainable parameter receives a gradient,
// the step completes inside the last gradient hook, so the gradients are
// averaged when autograd.Backward returns (ctx bounds the reductions).
// When some parameter receives none, only Backward can finish the step;
// the next Call then fails, naming the missing Backward.
func (m *Model) Call(ctx context.Context, forward func() *autograd.Var) (*autograd.Var, error) {
	if err := m.core.Usable("Forward"); err != nil {
		return nil, err
	}
	if m.red.InFlight() {
		return nil, fmt.Errorf("ddp: Forward: the previous backward pass was not finished with Backward (some parameter received no gradient, so it could not complete on its own)")
	}
	r := wrapcore.JoinRound{Authority: 0, Syncing: !m.core.Syncless}
	if m.join != nil {
		state := int64(wrapcore.JoinSyncing)
		if m.core.Syncless {
			state = wrapcore.JoinNoSync
		}
		var err error
		if r, err = m.round(ctx, state); err != nil {
			return nil, err
		}
	}
	if n := int64(m.o.VerifyEvery); n > 0 && r.Syncing && m.join == nil && m.step > 0 && m.step%n == 0 && m.verifiedAt != m.step {
		m.verifiedAt = m.step
		if err := m.VerifyReplicas(ctx); err != nil {
			return nil, fmt.Errorf("ddp: Forward: divergence guard (Options.VerifyEvery %d) after step %d: %w", n, m.step, err)
		}
	}
	t0 := time.Now()
	if r.Syncing && !m.o.NoBroadcastBuffers && len(m.buffers) > 0 {
		if err := m.broadcastState(ctx, r.Authority, false); err != nil {
			return nil, fmt.Errorf("ddp: Forward: buffer broadcast from rank %d: %w", r.Authority, err)
		}
	}
	t1 := time.Now()
	m.beginStep(r, false)
	m.ctx = ctx
	out := forward()
	m.cur = stepTimes{forward: time.Since(t1), buffers: t1.Sub(t0)}
	return out, nil
}

// beginStep arms the reducer for one backward pass.
func (m *Model) beginStep(r wrapcore.JoinRound, shadow bool) {
	m.shadow = shadow
	m.divisor = m.world
	if m.join != nil && !m.o.JoinDivideByWorldSize {
		m.divisor = len(r.Active)
	}
	for _, bs := range m.buckets {
		bs.red = nil
	}
	m.red.Arm(r.Syncing, shadow)
}

// Backward runs autograd's backward pass from loss and, for a
// synchronised step, waits for every bucket's reduction: when it returns
// nil, every trainable parameter's Grad holds the average over the ranks.
// Reductions start during the pass as buckets fill. An error names the
// failing bucket or, without FindUnusedParameters, the parameters that
// received no gradient; the collectives of the step are still all issued,
// so the other ranks do not hang.
func (m *Model) Backward(ctx context.Context, loss *autograd.Var) error {
	if err := m.core.Usable("Backward"); err != nil {
		return err
	}
	if !m.red.Armed() {
		return fmt.Errorf("ddp: Backward: no Forward through the Model since the last Backward")
	}
	m.ctx = ctx
	defer func() { m.ctx = nil }()
	t0 := time.Now()
	autograd.Backward(loss)
	m.cur.backward = time.Since(t0)
	if !m.red.Armed() { // completed inside the last gradient hook
		m.stats.Backward += m.cur.backward
		return m.core.TakeErr()
	}
	m.cur.backwardEnd = time.Now()
	return m.finishStep(ctx) // issues the step's collectives even after a hook error
}
