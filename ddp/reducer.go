package ddp

// The reducer: gradient-ready hooks mark parameters ready, full buckets
// start their reduction in plan order while backward continues, and
// finishStep waits for them once autograd returns.

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"
	"unsafe"

	"cohort/dist"
	"cohort/tensor"
)

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
	flat := alignedFloats(plan.Len())
	buckets := make([]*bucketState, len(plan.Buckets))
	views := make([]*tensor.Tensor, len(m.params))
	for k, bp := range plan.Buckets {
		bs := &bucketState{b: Bucket{Index: k, Grad: flat[bp.Start:bp.End]}, paramBytes: bp.ParamBytes}
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

// alignedFloats returns n zeroed float32s starting on a 64-byte boundary,
// so that the plan's 16-element slot alignment is cache-line alignment in
// memory (Go's heap does not move objects).
func alignedFloats(n int) []float32 {
	buf := make([]float32, n+gradAlign)
	skip := 0
	if r := uintptr(unsafe.Pointer(unsafe.SliceData(buf))) % 64; r != 0 {
		skip = int(64-r) / gradElemBytes
	}
	return buf[skip : skip+n : skip+n]
}

// copyInto copies t's elements (any layout) into dst.
func copyInto(dst []float32, t *tensor.Tensor) {
	copy(dst, t.Contiguous().Data())
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
	want := slices.Clone(m.tracked)
	slices.Reverse(want)
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
		if v < 0 || int(v) >= len(m.params) || m.bucketOf[v] < 0 {
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
