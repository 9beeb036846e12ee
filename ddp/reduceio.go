package ddp

// The reducer's I/O: the flat gradient buffer the buckets live in, the
// communication hook that reduces them, and the broadcast that agrees on
// the rebuilt bucket order. The state machine itself is reducer.Reducer.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/cohortml/cohort/distributed"
	"github.com/cohortml/cohort/internal/dp/reducer"
	"github.com/cohortml/cohort/internal/dp/wrapcore"
	"github.com/cohortml/cohort/tensor"
)

// setPlan lays the tracked parameters out in buckets in the given order
// and (re)allocates the flat gradient buffer, carrying existing gradient
// views over. It returns each bucket's parameters for the reducer.
func (m *Model) setPlan(order []int) ([][]int, error) {
	numel := make([]int, len(m.params))
	for i, np := range m.params {
		numel[i] = np.Param.Value.Len()
	}
	plan, err := reducer.PlanBuckets(numel, order, m.o.FirstBucketCapBytes, m.o.BucketCapBytes)
	if err != nil {
		return nil, err
	}
	var flat []float32
	var flatDev *tensor.Tensor
	if m.dev.IsCPU() {
		flat = wrapcore.AlignedFloats(plan.Len())
	} else {
		flatDev = tensor.NewOn(m.dev, plan.Len())
	}
	buckets := make([]*bucketState, len(plan.Buckets))
	views := make([]*tensor.Tensor, len(m.params))
	members := make([][]int, len(plan.Buckets))
	for k, bp := range plan.Buckets {
		members[k] = slices.Clone(bp.Params)
		bs := &bucketState{paramBytes: bp.ParamBytes}
		bs.b.Index = k
		if flatDev != nil {
			bs.b.Tensor = contiguousView(flatDev.Buffer(), bp.Start, []int{bp.End - bp.Start})
		} else {
			bs.b.Grad = flat[bp.Start:bp.End]
		}
		for _, i := range bp.Params {
			off, n := plan.Offset[i], numel[i]
			bs.b.Params = append(bs.b.Params, BucketParam{Name: m.params[i].Name, Shape: m.params[i].Param.Value.Shape(), Offset: off - bp.Start, Len: n})
			if flatDev != nil { // device gradients are always views of the bucket
				v := contiguousView(flatDev.Buffer(), off, m.params[i].Param.Value.Shape())
				p := m.params[i].Param
				if p.Grad != nil {
					v.CopyFrom(p.Grad)
				}
				p.Grad = v
				views[i] = v
			} else if m.o.GradientAsBucketView {
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
	m.plan, m.flat, m.flatDev, m.buckets, m.views = plan, flat, flatDev, buckets, views
	if m.o.Span != nil {
		m.spanNames = make([]string, len(buckets))
		for k := range buckets {
			m.spanNames[k] = fmt.Sprintf("all_reduce bucket %d", k)
		}
		m.spanEnds = make([]func(), len(buckets))
	}
	return members, nil
}

// copyInto copies t's elements (any layout) into dst.
func copyInto(dst []float32, t *tensor.Tensor) {
	copy(dst, t.Contiguous().Data())
}

// onReady runs from autograd when parameter i's gradient is final. When
// the last bucket has started, the step completes right here, so a plain
// autograd.Backward leaves averaged gradients too.
func (m *Model) onReady(i int) {
	err := m.red.Ready(i)
	switch {
	case errors.Is(err, reducer.ErrNotArmed):
		err = fmt.Errorf("ddp: gradient of parameter %q computed by a backward pass that did not start from Model.Forward (use Module() for local passes, or NoSync)", m.params[i].Name)
	case errors.Is(err, reducer.ErrTwice):
		err = fmt.Errorf("ddp: parameter %q received its gradient twice in one step (two Backward calls after one Forward?)", m.params[i].Name)
	}
	m.core.SetErr(err)
	if m.red.Armed() && m.red.Syncing() && m.red.AllStarted() {
		m.cur.backwardEnd = time.Now()
		m.core.SetErr(m.finishStep(m.ctx))
	}
}

// reducerIO is the Model seen as the reducer's I/O.
type reducerIO Model

// Take implements reducer.IO: it brings parameter i's current gradient
// into its bucket slot.
func (io *reducerIO) Take(i int, used bool) error {
	m := (*Model)(io)
	p := m.params[i].Param
	off := m.plan.Offset[i]
	if m.flatDev != nil {
		return m.takeDevice(i)
	}
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

// Start implements reducer.IO: it hands bucket k to the communication hook.
func (io *reducerIO) Start(k int) reducer.Handle {
	m := (*Model)(io)
	bs := m.buckets[k]
	bs.b.Divisor, bs.b.Step, bs.b.Shadow = m.divisor, m.step, m.shadow
	ctx := m.ctx
	if ctx == nil {
		ctx = context.Background()
	}
	if m.o.Span != nil {
		m.spanEnds[k] = m.o.Span(trackComm, m.spanNames[k])
	}
	bs.red = m.o.Hook.Start(ctx, m.pg, &bs.b)
	return bs.red
}

// Seen implements reducer.Observer: bucket k's communication is done, so
// its span closes.
func (io *reducerIO) Seen(k int) {
	m := (*Model)(io)
	if k < len(m.spanEnds) {
		if end := m.spanEnds[k]; end != nil {
			m.spanEnds[k] = nil
			end()
		}
	}
}

// Tracks of Options.Span, as package obs/trace names them.
const (
	trackCompute = "compute"
	trackComm    = "comm"
)

// Agree implements reducer.IO: the lowest active rank's gradient order,
// broadcast so every rank uses the same plan.
func (io *reducerIO) Agree(order []int) ([]int, error) {
	m := (*Model)(io)
	root := 0
	if m.join != nil && len(m.join.lastActive) > 0 {
		root = m.join.lastActive[0]
	}
	order64 := make([]int64, len(order))
	for k, i := range order {
		order64[k] = int64(i)
	}
	if m.world > 1 {
		ctx := m.ctx
		if ctx == nil {
			ctx = context.Background()
		}
		if err := m.pg.Broadcast(ctx, distributed.I64(order64), root).Wait(); err != nil {
			return nil, fmt.Errorf("ddp: rebuilding buckets: broadcast of rank %d's gradient order: %w", root, err)
		}
	}
	out := make([]int, len(order64))
	for k, v := range order64 {
		if v < 0 || int(v) >= len(m.params) {
			return nil, fmt.Errorf("ddp: rebuilding buckets: rank %d's gradient order names parameter %d, not a trainable parameter here", root, v)
		}
		out[k] = int(v)
	}
	return out, nil
}

// Replan implements reducer.IO.
func (io *reducerIO) Replan(order []int) ([][]int, error) {
	m := (*Model)(io)
	b, err := m.setPlan(order)
	if err != nil {
		return nil, fmt.Errorf("ddp: rebuilding buckets: %w", err)
	}
	return b, nil
}

// finishStep completes a step after autograd's backward returned (or in
// the last gradient hook): it takes the parameters without a gradient,
// waits for every reduction, copies the averages out, and rebuilds the
// buckets after the first synchronised step.
func (m *Model) finishStep(ctx context.Context) error {
	if !m.red.Syncing() {
		m.red.Disarm()
		m.stats.LocalSteps++
		m.stats.Forward += m.cur.forward
		m.stats.Backward += m.cur.backward
		return nil
	}
	prev := m.ctx
	m.ctx = ctx
	defer func() { m.ctx = prev }()
	if m.o.Span != nil && !m.shadow {
		defer m.o.Span(trackCompute, "wait for gradients")()
	}
	m.red.Poll(m.cur.backwardEnd)
	unusedIdx, takeErr, firstErr := m.red.Finish()
	var unused []string
	for _, i := range unusedIdx {
		unused = append(unused, fmt.Sprintf("%q", m.params[i].Name))
	}
	m.core.SetErr(takeErr) // reported after the step, like a hook's
	if firstErr != nil {
		return firstErr
	}
	if !m.shadow && !m.o.GradientAsBucketView {
		m.copyOut()
	}
	if !m.shadow {
		m.recordStep(time.Now())
	}
	if err := m.red.Rebuild(); err != nil {
		return err
	}
	m.step++
	if err := m.core.TakeErr(); err != nil {
		return err
	}
	if len(unused) > 0 && !m.o.FindUnusedParameters {
		return fmt.Errorf("ddp: Backward: parameters received no gradient in this step: %s (set Options.FindUnusedParameters if some parameters are legitimately unused, or freeze them)", strings.Join(unused, ", "))
	}
	return nil
}

// copyOut writes the averaged gradients back into the parameters' Grads.
func (m *Model) copyOut() {
	if m.flatDev != nil {
		return // device gradients are views of the buckets
	}
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
