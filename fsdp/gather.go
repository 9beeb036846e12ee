package fsdp

// Gathering parameters just in time, for the forward pass and again for
// the backward pass.
//
// A recorded autograd op keeps the tensors it read (a Linear keeps its
// weight) until backward has run through it, and a tensor's storage
// cannot be swapped out from under it. So the forward pass gathers every
// unit into one of two reusable slot buffers (unit u into slot u%2): the
// graph's closures point into the slots, never into memory of their own,
// and the units of one parity overwrite each other's values during the
// forward pass. Units.Run marks each unit's output with an identity op
// ("fsdp.unit") whose backward runs before any of the unit's own backward
// ops (they all consume its output); it gathers the unit's parameters back
// into its slot (unless the slot still holds them: the last two units)
// and starts gathering the next unit in backward order into the other
// slot. When the unit's backward has finished with its slot, that slot is
// overwritten by the unit after next. The same idea as activation
// recomputation, except that only the parameters are re-materialised, so
// no forward compute is repeated. Which unit each slot holds and which
// gathers are in flight is the slot table's (slots.go, a state machine
// with transcript tests); this file does the gathers and the buffers.

import (
	"context"
	"fmt"
	"github.com/cohortml/cohort/internal/dp/wrapcore"

	"github.com/cohortml/cohort/autograd"
	"github.com/cohortml/cohort/distributed"
	"github.com/cohortml/cohort/tensor"
)

// initGather sizes the slots and indexes parameters by unit.
func (m *Model) initGather() {
	ns := 2
	if m.o.KeepAfterForward {
		ns = max(1, len(m.units)-1)
	}
	m.slots, m.slotCap, m.slotWork = make([][]float32, ns), make([]int, ns), make([]distributed.Work, ns)
	m.unitOf = make([]int, len(m.params))
	for i := range m.unitOf {
		m.unitOf[i] = -1
	}
	empty := make([]bool, len(m.units))
	for u, ids := range m.units {
		for _, i := range ids {
			m.unitOf[i] = u
		}
		b := m.plan.Buckets[m.bucketOfUnit(u)]
		empty[u] = b.End == b.Start
		if u < len(m.units)-1 {
			m.slotCap[u%ns] = max(m.slotCap[u%ns], b.End-b.Start)
		}
	}
	m.gt = newSlotTable((*gatherIO)(m), ns, empty)
	m.ready = make([]int, len(m.units))
	m.entered = make([]bool, len(m.units))
}

// gatherIO is the slot table's I/O: the buffers and the all-gathers.
type gatherIO Model

// Gather implements the table's I/O: it starts all-gathering unit u's
// bucket into slot s (−1: the root's buffer), allocating it first use.
func (io *gatherIO) Gather(u, s int) {
	m := (*Model)(io)
	k := m.bucketOfUnit(u)
	n := m.plan.Buckets[k].End - m.plan.Buckets[k].Start
	if s < 0 {
		if m.rootBuf == nil {
			m.rootBuf = wrapcore.AlignedFloats(n)
		}
		m.rootWork = m.gather(m.gatherCtx, k, m.rootBuf)
		m.account()
		return
	}
	if m.slots[s] == nil {
		m.slots[s] = wrapcore.AlignedFloats(m.slotCap[s])
		m.account()
	}
	m.slotWork[s] = m.gather(m.gatherCtx, k, m.slots[s][:n])
}

// Wait implements the table's I/O: it waits for the gather of unit u
// into slot s.
func (io *gatherIO) Wait(u, s int) error {
	m := (*Model)(io)
	w := &m.rootWork
	if s >= 0 {
		w = &m.slotWork[s]
	}
	if *w == nil {
		return nil
	}
	err := (*w).Wait()
	*w = nil
	switch {
	case err == nil:
		return nil
	case s < 0:
		return fmt.Errorf("fsdp: all-gather of the root unit's parameters: %w", err)
	default:
		return fmt.Errorf("fsdp: all-gather of unit %d's parameters: %w", u, err)
	}
}

// gather starts all-gathering bucket k of the parameters into buf.
func (m *Model) gather(ctx context.Context, k int, buf []float32) distributed.Work {
	at := m.plan.ShardOffset(k)
	in := m.shardParam[at : at+m.plan.Buckets[k].Shard]
	m.gatherBytes += 4 * int64(len(buf))
	if m.world == 1 {
		copy(buf, in)
		return nil
	}
	// The shard is not written while a gather is in flight (Step and
	// LoadShardedStateDict wait for every gather first): no copy.
	return m.pg.AllGather(ctx, distributed.F32(buf), distributed.F32(in))
}

// startGather begins gathering unit u's parameters into its buffer, unless
// the buffer holds them already (or they are on their way).
func (m *Model) startGather(ctx context.Context, u int) error {
	m.gatherCtx = ctx
	defer func() { m.gatherCtx = nil }()
	return m.gt.Start(u)
}

// hold gathers unit u (waiting for a prefetch) and points its parameters'
// Values at the gathered values.
func (m *Model) hold(ctx context.Context, u int) error {
	m.gatherCtx = ctx
	s, err := m.gt.Hold(u)
	m.gatherCtx = nil
	if err != nil {
		return err
	}
	buf := m.rootBuf
	if s >= 0 {
		buf = m.slots[s]
	}
	b := m.plan.Buckets[m.bucketOfUnit(u)]
	for _, i := range m.units[u] {
		off := m.plan.Offset[i] - b.Start
		m.params[i].Param.Value = tensor.FromSlice(buf[off:off+m.plan.Numel[i]], m.shapes[i]...)
	}
	return nil
}

// release points unit u's parameters back at their placeholders; the
// gathered values stay in their buffer.
func (m *Model) release(u int) {
	for _, i := range m.units[u] {
		m.params[i].Param.Value = m.placeholder[i]
	}
}

// account records the gathered bytes held now in heldPeak.
func (m *Model) account() {
	held := 4 * int64(len(m.rootBuf))
	for _, s := range m.slots {
		held += 4 * int64(len(s))
	}
	m.heldPeak = max(m.heldPeak, held)
}

// dropGathered releases every gathered buffer (waiting for any gather in
// flight) and every parameter's values. The buffers are kept for the next
// step, or with FreeBuffers left to the garbage collector, which frees
// them once no autograd graph refers to them.
func (m *Model) dropGathered() {
	m.gt.Drop()
	if m.o.FreeBuffers {
		m.rootBuf = nil
		clear(m.slots)
	}
	for u := range m.units {
		m.release(u)
	}
	m.inBack = false
}

// gradReady counts parameter i's gradient as final in this pass; when
// every trainable parameter's is, the gathered buffers are dropped.
func (m *Model) gradReady(i int) {
	if u := m.unitOf[i]; u >= 0 {
		m.ready[u]++
		m.nReady++
		if m.nReady == len(m.red.Tracked()) {
			m.dropGathered()
		}
	}
}

// reenter is the backward of unit u's output marker: it gathers the unit's
// parameters back (for the graph of Call number gen) and prefetches unit
// u−1's. Errors are kept for Backward to report.
func (m *Model) reenter(u, gen int) {
	if gen != m.gen {
		m.core.SetErr(fmt.Errorf("fsdp: backward through unit %d of the graph of an earlier Call: finish each Call's backward pass before the next Call", u))
		return
	}
	m.inBack = true
	m.entered[u] = true
	for _, i := range m.units[u] {
		// Gradients are armed per unit as its backward begins: one that
		// is already there came from an op outside the unit.
		if m.params[i].Param.Grad != nil {
			m.core.SetErr(m.outside(i, "its gradient arrived before the unit's backward pass began"))
		}
	}
	if m.red.Armed() && m.red.Syncing() {
		m.armBucket(m.bucketOfUnit(u))
	}
	ctx := m.stepCtx()
	if err := m.hold(ctx, u); err != nil {
		m.core.SetErr(err)
		return
	}
	if !m.o.NoPrefetch && u > 0 {
		if err := m.startGather(ctx, u-1); err != nil {
			m.core.SetErr(err)
		}
	}
}

// outside is the error for parameter i used outside its unit's forward.
func (m *Model) outside(i int, why string) error {
	u := m.unitOf[i]
	return fmt.Errorf("fsdp: parameter %q of unit %d was used outside the unit's forward (Units.Run): %s; outside its unit a sharded parameter holds no values (a parameter that other code also uses belongs in the root: leave it out of the units)", m.params[i].Name, u, why)
}

// Units runs the units of one forward pass; Call hands it to the forward
// function.
type Units struct {
	m   *Model
	ctx context.Context
	err error
}

// Run runs f, the forward pass of unit u, on x with the unit's parameters
// gathered (waiting for a prefetch, and prefetching unit u+1), and
// releases them afterwards. Its output carries a marker whose backward
// gathers the parameters again (see the package doc). f must read the
// unit's parameters, in backward, only in ops that also take (a value
// computed from) x, as layers do: an op on the parameters alone may pass
// them through or change their gradient, but its backward must not read
// their values (fsdp cannot check this). After an error Run returns x
// unchanged and Call reports the error.
func (us *Units) Run(u int, x *autograd.Var, f func(*autograd.Var) *autograd.Var) *autograd.Var {
	m := us.m
	if us.err != nil {
		return x
	}
	if u < 0 || u >= len(m.units)-1 {
		us.err = fmt.Errorf("fsdp: Run: unit %d of %d", u, len(m.units)-1)
		return x
	}
	if err := m.hold(us.ctx, u); err != nil {
		us.err = err
		return x
	}
	if !m.o.NoPrefetch && u+1 < len(m.units)-1 {
		if err := m.startGather(us.ctx, u+1); err != nil {
			us.err = err
			return x
		}
	}
	y := f(x)
	m.release(u)
	if !y.RequiresGrad() || len(m.units[u]) == 0 {
		return y
	}
	gen := m.gen
	return autograd.OnBackward("fsdp.unit", y, func() { m.reenter(u, gen) })
}
