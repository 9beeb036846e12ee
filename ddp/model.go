package ddp

import (
	"context"
	"errors"
	"fmt"
	"strings"
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

// bucketState is a bucket at run time.
type bucketState struct {
	b        Bucket
	red      Reduction
	launched time.Time
	done     time.Time
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
	order := reverseOrder(len(m.params), func(i int) bool { return m.params[i].Param.RequiresGrad() })
	if err := m.setPlan(order); err != nil {
		return nil, err
	}
	for _, i := range m.tracked {
		i := i
		m.removes = append(m.removes, m.params[i].Param.OnGradReady(func(*autograd.Var) { m.onReady(i) }))
	}
	return m, nil
}

// describe lists the parameters and buffers for the cross-rank check and
// rejects what the collectives cannot carry.
func (m *Model) describe() ([]tensorSpec, error) {
	specs := make([]tensorSpec, 0, len(m.params)+len(m.buffers))
	seen := map[*autograd.Var]string{}
	for _, np := range m.params {
		p := np.Param
		switch {
		case p == nil || p.Value == nil:
			return nil, fmt.Errorf("ddp: Wrap: parameter %q is nil", np.Name)
		case !p.IsLeaf():
			return nil, fmt.Errorf("ddp: Wrap: parameter %q is not a leaf", np.Name)
		case !p.Value.IsContiguous():
			return nil, fmt.Errorf("ddp: Wrap: parameter %q is a non-contiguous view (shape %v)", np.Name, p.Value.Shape())
		}
		if prev, dup := seen[p]; dup {
			return nil, fmt.Errorf("ddp: Wrap: parameters %q and %q are the same variable (shared parameters must be listed once)", prev, np.Name)
		}
		seen[p] = np.Name
		specs = append(specs, tensorSpec{Kind: "parameter", Name: np.Name, Shape: p.Value.Shape(), DType: "float32", Grad: p.RequiresGrad()})
	}
	for _, nb := range m.buffers {
		switch {
		case nb.Buffer == nil:
			return nil, fmt.Errorf("ddp: Wrap: buffer %q is nil", nb.Name)
		case !nb.Buffer.IsContiguous():
			return nil, fmt.Errorf("ddp: Wrap: buffer %q is a non-contiguous view (shape %v)", nb.Name, nb.Buffer.Shape())
		}
		specs = append(specs, tensorSpec{Kind: "buffer", Name: nb.Name, Shape: nb.Buffer.Shape(), DType: "float32"})
	}
	return specs, nil
}

// checkSpecs compares every rank's description with rank 0's. The common
// case costs one small all-gather; on a mismatch rank 0's full description
// is broadcast so that every rank can name the culprit.
func (m *Model) checkSpecs(ctx context.Context, specs []tensorSpec) error {
	if m.world == 1 {
		return nil
	}
	enc := encodeSpecs(specs)
	mine := []int64{int64(len(specs)), specHash(enc), int64(len(enc))}
	all := make([]int64, 3*m.world)
	if err := m.pg.AllGather(ctx, dist.I64(all), dist.I64(mine)).Wait(); err != nil {
		return fmt.Errorf("ddp: Wrap: exchanging model fingerprints: %w", err)
	}
	same := true
	for r := 1; r < m.world; r++ {
		if all[3*r] != all[0] || all[3*r+1] != all[1] || all[3*r+2] != all[2] {
			same = false
		}
	}
	if same {
		return nil
	}
	rootLen := int(all[2])
	rootWords := make([]int64, (rootLen+7)/8)
	if m.rank == 0 {
		copy(rootWords, packBytes(enc))
	}
	if err := m.pg.Broadcast(ctx, dist.I64(rootWords), 0).Wait(); err != nil {
		return fmt.Errorf("ddp: Wrap: model fingerprints differ; broadcasting rank 0's description: %w", err)
	}
	root, err := decodeSpecs(unpackBytes(rootWords, rootLen))
	if err != nil {
		return fmt.Errorf("ddp: Wrap: model fingerprints differ; rank 0's description: %w", err)
	}
	at := []int64{int64(firstSpecMismatch(specs, root))}
	ats := make([]int64, m.world)
	if err := m.pg.AllGather(ctx, dist.I64(ats), dist.I64(at)).Wait(); err != nil {
		return fmt.Errorf("ddp: Wrap: model fingerprints differ; exchanging where: %w", err)
	}
	bad, at0 := -1, -1
	var ranks []string
	for r, i := range ats {
		if i >= 0 {
			if bad < 0 {
				bad, at0 = r, int(i)
			}
			ranks = append(ranks, fmt.Sprintf("rank %d at entry %d", r, i))
		}
	}
	if bad < 0 { // hashes differ but the descriptions match: cannot happen
		return fmt.Errorf("ddp: Wrap: model fingerprints differ across ranks %v but the descriptions match", all)
	}
	// The first differing rank tells everyone what it has there.
	var desc []byte
	if m.rank == bad {
		desc = []byte(describeAt(specs, at0))
	}
	n := []int64{int64(len(desc))}
	if err := m.pg.Broadcast(ctx, dist.I64(n), bad).Wait(); err != nil {
		return fmt.Errorf("ddp: Wrap: model differs on rank %d at entry %d; broadcasting its description: %w", bad, at0, err)
	}
	words := make([]int64, (n[0]+7)/8)
	if m.rank == bad {
		copy(words, packBytes(desc))
	}
	if err := m.pg.Broadcast(ctx, dist.I64(words), bad).Wait(); err != nil {
		return fmt.Errorf("ddp: Wrap: model differs on rank %d at entry %d; broadcasting its description: %w", bad, at0, err)
	}
	return fmt.Errorf("ddp: Wrap: model differs across ranks: rank %d has %s where rank 0 has %s (differences: %s)",
		bad, unpackBytes(words, int(n[0])), describeAt(root, at0), strings.Join(ranks, "; "))
}

// broadcastState copies root's buffers (and, with params, parameters) to
// every rank, coalesced into messages of at most BucketCapBytes.
func (m *Model) broadcastState(ctx context.Context, root int, params bool) error {
	if m.world == 1 {
		return nil
	}
	var ts []*tensor.Tensor
	if params {
		for _, np := range m.params {
			ts = append(ts, np.Param.Value)
		}
	}
	for _, nb := range m.buffers {
		ts = append(ts, nb.Buffer)
	}
	if len(ts) == 0 {
		return nil
	}
	limit := int(m.o.BucketCapBytes / gradElemBytes)
	for len(ts) > 0 {
		// Take tensors until the chunk is full (at least one).
		n, total := 0, 0
		for n < len(ts) && (n == 0 || total+ts[n].Len() <= limit) {
			total += ts[n].Len()
			n++
		}
		if cap(m.bufFlat) < total {
			m.bufFlat = make([]float32, total)
		}
		buf := m.bufFlat[:total]
		if m.rank == root {
			k := 0
			for _, t := range ts[:n] {
				k += copy(buf[k:], t.Data())
			}
		}
		if err := m.pg.Broadcast(ctx, dist.F32(buf), root).Wait(); err != nil {
			return err
		}
		if m.rank != root {
			k := 0
			for _, t := range ts[:n] {
				k += copy(t.Data(), buf[k:])
			}
		}
		ts = ts[n:]
	}
	return nil
}

// setPlan lays the tracked parameters out in buckets in the given order
// and (re)allocates the flat gradient buffer, carrying existing gradient
// views over.
func (m *Model) setPlan(order []int) error {
	numel := make([]int, len(m.params))
	for i, np := range m.params {
		numel[i] = np.Param.Value.Len()
	}
	plan, err := PlanBuckets(numel, order, m.o.FirstBucketCapBytes, m.o.BucketCapBytes)
	if err != nil {
		return err
	}
	flat := make([]float32, plan.Len())
	buckets := make([]*bucketState, len(plan.Buckets))
	views := make([]*tensor.Tensor, len(m.params))
	for k, bp := range plan.Buckets {
		bs := &bucketState{b: Bucket{Index: k, Grad: flat[bp.Start:bp.End]}}
		for _, i := range bp.Params {
			m.bucketOf[i] = k
			off, n := plan.Offset[i], numel[i]
			bs.b.Params = append(bs.b.Params, BucketParam{Name: m.params[i].Name, Shape: m.params[i].Param.Value.Shape(), Offset: off - bp.Start, Len: n})
			if m.o.GradientAsBucketView {
				v := tensor.FromSlice(flat[off:off+n], m.params[i].Param.Value.Shape()...)
				p := m.params[i].Param
				if p.Grad != nil {
					copyInto(v.Data(), p.Grad)
				}
				p.Grad = v
				views[i] = v
			}
		}
		buckets[k] = bs
	}
	m.plan, m.flat, m.buckets, m.views = plan, flat, buckets, views
	m.pending = make([]int, len(buckets))
	return nil
}

// copyInto copies t's elements (any layout) into dst.
func copyInto(dst []float32, t *tensor.Tensor) {
	copy(dst, t.Contiguous().Data())
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

// onReady runs from autograd when parameter i's gradient is final.
func (m *Model) onReady(i int) {
	if !m.armed {
		if m.hookErr == nil {
			m.hookErr = fmt.Errorf("ddp: gradient of parameter %q computed by a backward pass that did not start from Model.Forward (use Module() for local passes, or NoSync)", m.params[i].Name)
		}
		return
	}
	if !m.syncing {
		return
	}
	if m.ready[i] {
		if m.hookErr == nil {
			m.hookErr = fmt.Errorf("ddp: parameter %q received its gradient twice in one step (two Backward calls after one Forward?)", m.params[i].Name)
		}
		return
	}
	m.ready[i] = true
	m.anyReady = true
	if !m.rebuilt {
		m.observed = append(m.observed, i)
	}
	if err := m.gradIn(i); err != nil && m.hookErr == nil {
		m.hookErr = err
	}
	m.pending[m.bucketOf[i]]--
	m.launchReady()
	m.pollDone(time.Now())
}

// gradIn brings parameter i's current gradient into its bucket slot.
func (m *Model) gradIn(i int) error {
	p := m.params[i].Param
	off := m.plan.Offset[i]
	slot := m.flat[off : off+p.Value.Len()]
	if v := m.views[i]; v != nil {
		if p.Grad == v {
			return nil
		}
		// The Grad was replaced (or dropped): carry its value into the view.
		if p.Grad == nil {
			clear(slot)
		} else if p.Grad.Len() != len(slot) {
			return fmt.Errorf("ddp: parameter %q: gradient has shape %v, parameter %v", m.params[i].Name, p.Grad.Shape(), p.Value.Shape())
		} else {
			copyInto(slot, p.Grad)
		}
		p.Grad = v
		return nil
	}
	if m.identity {
		return nil // copyOut leaves Grad as it is
	}
	switch {
	case p.Grad == nil:
		clear(slot)
	case p.Grad.Len() != len(slot):
		return fmt.Errorf("ddp: parameter %q: gradient has shape %v, parameter %v", m.params[i].Name, p.Grad.Shape(), p.Value.Shape())
	default:
		copyInto(slot, p.Grad)
	}
	return nil
}

// launchReady starts, in plan order, every bucket whose parameters are all
// ready.
func (m *Model) launchReady() {
	for m.next < len(m.buckets) && m.pending[m.next] == 0 {
		bs := m.buckets[m.next]
		bs.b.Divisor, bs.b.Step, bs.b.Shadow = m.divisor, m.step, m.shadow
		bs.launched = time.Now()
		bs.red = m.o.Hook.Start(m.ctx, m.pg, &bs.b)
		bs.done = time.Time{}
		m.next++
	}
}

// pollDone stamps the buckets whose communication has completed since the
// last poll. It runs at every gradient-ready hook and when autograd's
// backward returns, so a stamp is late by at most one parameter's
// backward computation.
func (m *Model) pollDone(now time.Time) {
	for _, bs := range m.buckets[:m.next] {
		if !bs.done.IsZero() {
			continue
		}
		select {
		case <-bs.red.Done():
			bs.done = now
		default:
		}
	}
}

// finishStep completes a step after autograd's backward returned: it
// starts the buckets still waiting (parameters without a gradient), waits
// for every reduction, copies the averages out, and rebuilds the buckets
// after the first synchronised step.
func (m *Model) finishStep(ctx context.Context) error {
	m.armed = false
	if !m.syncing {
		m.stats.LocalSteps++
		m.stats.Forward += m.cur.forward
		m.stats.Backward += m.cur.backward
		return nil
	}
	m.pollDone(m.cur.backwardEnd)
	var unused []string
	if !m.shadow {
		for _, i := range m.tracked {
			if m.ready[i] {
				continue
			}
			unused = append(unused, fmt.Sprintf("%q", m.params[i].Name))
			if err := m.gradIn(i); err != nil && m.hookErr == nil {
				m.hookErr = err
			}
			m.pending[m.bucketOf[i]]--
		}
		m.launchReady()
	}
	var firstErr error
	for _, bs := range m.buckets {
		if err := bs.red.Finish(); err != nil && firstErr == nil {
			firstErr = err
		}
		if bs.done.IsZero() {
			bs.done = time.Now()
		}
	}
	if firstErr != nil {
		return firstErr
	}
	if !m.shadow && !m.o.GradientAsBucketView {
		m.copyOut()
	}
	if !m.shadow {
		m.recordStep(time.Now())
	}
	if !m.rebuilt {
		if err := m.rebuild(ctx); err != nil {
			return err
		}
	}
	m.step++
	if err := m.hookErr; err != nil {
		m.hookErr = nil
		return err
	}
	if len(unused) > 0 && !m.o.FindUnusedParameters {
		return fmt.Errorf("ddp: Backward: parameters received no gradient in this step: %s (set Options.FindUnusedParameters if some parameters are legitimately unused, or freeze them)", strings.Join(unused, ", "))
	}
	return nil
}

// copyOut writes the averaged gradients back into the parameters' Grads.
func (m *Model) copyOut() {
	for _, i := range m.tracked {
		p := m.params[i].Param
		if m.identity {
			if p.Grad == nil { // an unused parameter: its average is zero
				p.Grad = tensor.New(p.Value.Shape()...)
			}
			continue
		}
		off := m.plan.Offset[i]
		slot := m.flat[off : off+p.Value.Len()]
		if p.Grad == nil || !p.Grad.IsContiguous() || p.Grad.Len() != len(slot) {
			p.Grad = tensor.New(p.Value.Shape()...)
		}
		copy(p.Grad.Data(), slot)
	}
}

// rebuild re-plans the buckets in the order the gradients became ready on
// the lowest active rank, broadcast so every rank uses the same plan.
func (m *Model) rebuild(ctx context.Context) error {
	root := 0
	if m.join != nil && len(m.join.lastActive) > 0 {
		root = m.join.lastActive[0]
	}
	want := reverseOrder(len(m.params), func(i int) bool { return m.params[i].Param.RequiresGrad() })
	order64 := make([]int64, len(want))
	for k, i := range completeOrder(m.observed, want) {
		order64[k] = int64(i)
	}
	if m.world > 1 {
		if err := m.pg.Broadcast(ctx, dist.I64(order64), root).Wait(); err != nil {
			return fmt.Errorf("ddp: rebuilding buckets: broadcast of rank %d's gradient order: %w", root, err)
		}
	}
	order := make([]int, len(order64))
	for k, v := range order64 {
		if v < 0 || int(v) >= len(m.params) || !m.params[v].Param.RequiresGrad() {
			return fmt.Errorf("ddp: rebuilding buckets: rank %d's gradient order names parameter %d, not a trainable parameter here", root, v)
		}
		order[k] = int(v)
	}
	if err := m.setPlan(order); err != nil {
		return fmt.Errorf("ddp: rebuilding buckets from rank %d's gradient order: %w", root, err)
	}
	m.rebuilt, m.observed = true, nil
	return nil
}
