package ddp

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"cohort/autograd"
	"cohort/dist"
	"cohort/nn"
	"cohort/tensor"
)

// Model is a module replicated across a process group. Create it with
// Wrap; drive it with Forward and Backward from one goroutine.
type Model struct {
	module      nn.Layer
	pg          dist.ProcessGroup
	o           Options
	rank, world int

	params  []nn.NamedParameter
	buffers []nn.NamedBuffer
	tracked []int // indices of the parameters that require grad
	removes []func()
	closed  bool

	// Buckets. Invariant: flat has plan.Len() elements; bucketOf[p] is the
	// bucket of tracked parameter p (-1 otherwise); in view mode
	// views[p] is the Grad the parameter should have.
	plan     Plan
	flat     []float32
	buckets  []*bucketState
	bucketOf []int
	views    []*tensor.Tensor
	rebuilt  bool
	step     int64 // synchronised steps finished, equal on every rank
	// identity is set when reducing is the identity (one rank, exact
	// all-reduce): gradients then stay where autograd put them.
	identity bool

	// The current step. armed is set by Forward and cleared by Backward.
	noSync   bool
	armed    bool
	syncing  bool
	shadow   bool
	divisor  int
	anyReady bool
	ready    []bool
	observed []int // ready order of the first synchronised step
	pending  []int // per bucket: tracked parameters not yet ready
	next     int   // first bucket not started
	ctx      context.Context
	hookErr  error
	bufFlat  []float32

	join *joinState

	stats Stats
	cur   stepTimes
}

var _ nn.Module = (*Model)(nil)

// bucketState is a bucket at run time.
type bucketState struct {
	b          Bucket
	paramBytes int64
	red        Reduction
	launched   time.Time
	done       time.Time
}

// Wrap replicates model across pg. It checks that every rank's model has
// the same parameters and buffers (names, shapes, dtypes, which parameters
// are trainable), then copies rank 0's parameters and buffers to every
// rank. Every rank must call Wrap at the same point; it blocks until the
// check and the copy are done. Wrap registers gradient-ready hooks on the
// model's trainable parameters; Close removes them.
func Wrap(ctx context.Context, model nn.Layer, pg dist.ProcessGroup, o Options) (*Model, error) {
	if model == nil || pg == nil {
		return nil, errors.New("ddp: Wrap: nil model or process group")
	}
	if err := o.validate(); err != nil {
		return nil, err
	}
	m := &Model{module: model, pg: pg, o: o, rank: pg.Rank(), world: pg.Size()}
	switch o.Hook.(type) {
	case AllReduceHook, *AllReduceHook:
		m.identity = m.world == 1
	}
	m.params = model.NamedParameters()
	m.buffers = model.NamedBuffers()
	specs, err := m.describe()
	if err != nil {
		return nil, err
	}
	if err := m.checkSpecs(ctx, specs); err != nil {
		return nil, err
	}
	if err := m.broadcastState(ctx, 0, true); err != nil {
		return nil, fmt.Errorf("ddp: Wrap: broadcast from rank 0: %w", err)
	}
	m.bucketOf = make([]int, len(m.params))
	m.ready = make([]bool, len(m.params))
	for i, np := range m.params {
		m.bucketOf[i] = -1
		if np.Param.RequiresGrad() {
			m.tracked = append(m.tracked, i)
		}
	}
	// Before any step, expect gradients in the reverse of registration order.
	order := slices.Clone(m.tracked)
	slices.Reverse(order)
	if err := m.setPlan(order); err != nil {
		return nil, err
	}
	for _, i := range m.tracked {
		m.removes = append(m.removes, m.params[i].Param.OnGradReady(func(*autograd.Var) { m.onReady(i) }))
	}
	return m, nil
}

// Module returns the wrapped module (for evaluation, or saving).
func (m *Model) Module() nn.Layer { return m.module }

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
func (m *Model) Close() error {
	if m.closed {
		return nil
	}
	for _, rm := range m.removes {
		rm()
	}
	m.removes, m.closed = nil, true
	return nil
}

func (m *Model) usable(op string) error {
	if m.closed {
		return fmt.Errorf("ddp: %s: model is closed", op)
	}
	if err := m.hookErr; err != nil {
		m.hookErr = nil
		m.armed = false
		return err
	}
	return nil
}

// NoSync runs fn with gradient synchronisation off: the forward and
// backward passes fn runs through this Model communicate nothing and
// gradients accumulate locally; the next synchronised Backward averages
// the accumulated sums. Every rank must use NoSync for the same steps.
func (m *Model) NoSync(fn func() error) error {
	prev := m.noSync
	m.noSync = true
	defer func() { m.noSync = prev }()
	return fn()
}

// Forward runs the wrapped module's forward pass on x and prepares the
// gradient reduction of the backward pass that follows. Before a
// synchronised forward it broadcasts rank 0's buffers (unless
// Options.NoBroadcastBuffers); inside Join it first takes part in the
// join round. It blocks on those collectives.
func (m *Model) Forward(ctx context.Context, x *autograd.Var) (*autograd.Var, error) {
	if err := m.usable("Forward"); err != nil {
		return nil, err
	}
	if m.armed && m.syncing && m.anyReady {
		return nil, fmt.Errorf("ddp: Forward: the previous backward pass was not finished with Backward")
	}
	r := joinRound{authority: 0, syncing: !m.noSync}
	if m.join != nil {
		state := int64(joinSyncing)
		if m.noSync {
			state = joinNoSync
		}
		var err error
		if r, err = m.round(ctx, state); err != nil {
			return nil, err
		}
	}
	t0 := time.Now()
	if r.syncing && !m.o.NoBroadcastBuffers && len(m.buffers) > 0 {
		if err := m.broadcastState(ctx, r.authority, false); err != nil {
			return nil, fmt.Errorf("ddp: Forward: buffer broadcast from rank %d: %w", r.authority, err)
		}
	}
	t1 := time.Now()
	m.beginStep(r, false)
	out := m.module.Forward(x)
	m.cur = stepTimes{forward: time.Since(t1), buffers: t1.Sub(t0)}
	return out, nil
}

// beginStep arms the reducer for one backward pass.
func (m *Model) beginStep(r joinRound, shadow bool) {
	m.armed, m.syncing, m.shadow, m.anyReady = true, r.syncing, shadow, false
	m.divisor = m.world
	if m.join != nil && !m.o.JoinDivideByWorldSize {
		m.divisor = len(r.active)
	}
	clear(m.ready)
	for k, bs := range m.buckets {
		m.pending[k] = len(bs.b.Params)
		bs.red = nil
	}
	m.next = 0
}

// Backward runs autograd's backward pass from loss and, for a
// synchronised step, waits for every bucket's reduction: when it returns
// nil, every trainable parameter's Grad holds the average over the ranks.
// Reductions start during the pass as buckets fill. An error names the
// failing bucket or, without FindUnusedParameters, the parameters that
// received no gradient; the collectives of the step are still all issued,
// so the other ranks do not hang.
func (m *Model) Backward(ctx context.Context, loss *autograd.Var) error {
	if err := m.usable("Backward"); err != nil {
		return err
	}
	if !m.armed {
		return fmt.Errorf("ddp: Backward: no Forward through the Model since the last Backward")
	}
	m.ctx = ctx
	defer func() { m.ctx = nil }()
	t0 := time.Now()
	autograd.Backward(loss)
	m.cur.backward = time.Since(t0)
	m.cur.backwardEnd = time.Now()
	return m.finishStep(ctx) // issues the step's collectives even after a hook error
}
