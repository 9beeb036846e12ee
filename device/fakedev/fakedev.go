// Package fakedev is a deterministic stand-in for a GPU in tests: device
// memory with a capacity (no bytes behind it), and streams whose work runs
// only when the test says so, so that orderings a real device makes by
// timing can be forced and checked.
//
// Work on a stream is a queue of operations: Claim (the memory now belongs
// to an owner tag), Use (the memory is read or written by a tag: a use
// that finds another owner is a violation, the race a caching allocator
// must prevent), event records and waits. [Device.Step] and [Device.Run]
// execute queued operations in stream order; an event completes when its
// stream has executed everything queued before it; a wait blocks its
// stream until its event completes. SyncEvent runs whatever it needs.
//
// Free, like cuMemFree, first runs every stream to the end. A Device
// satisfies alloc.Mem. It is safe for concurrent use, but tests
// normally drive it from one goroutine; it never blocks (SyncEvent runs
// the queued work itself).
package fakedev

import (
	"fmt"
	"sort"
	"sync"

	"github.com/cohortml/cohort/device/alloc"
)

// Base is the address of the first allocation.
const Base alloc.Ptr = 0x10000000

// Granule is the resolution of ownership tracking; allocations are
// aligned to it.
const Granule = 512

// Device is a fake GPU.
type Device struct {
	mu         sync.Mutex
	capacity   int64
	used       int64
	next       alloc.Ptr
	allocs     map[alloc.Ptr]*allocation
	bases      []alloc.Ptr // of allocs, ascending (addresses only grow)
	streams    map[alloc.Stream]*stream
	events     map[alloc.Event]*event
	nextEvent  alloc.Event
	violations []string

	// FailRecord makes RecordEvent fail (to test that path).
	FailRecord bool
}

// allocation is one Alloc: its size and the owner tag of each granule
// (0: none).
type allocation struct {
	n     int64
	owner []int
}

type opKind uint8

const (
	opClaim opKind = iota
	opUse
	opWait
)

type op struct {
	kind opKind
	ptr  alloc.Ptr
	n    int64
	tag  int
	ev   *event
}

type stream struct {
	queue    []op
	executed int // ops executed since creation; queue holds the rest
}

type event struct {
	s   alloc.Stream
	pos int // done when the stream has executed pos ops
}

// New returns a device with capacity bytes of memory.
func New(capacity int64) *Device {
	return &Device{capacity: capacity, next: Base, allocs: map[alloc.Ptr]*allocation{},
		streams: map[alloc.Stream]*stream{}, events: map[alloc.Event]*event{}, nextEvent: 1}
}

var _ alloc.Mem = (*Device)(nil)

func (d *Device) stream(s alloc.Stream) *stream {
	st := d.streams[s]
	if st == nil {
		st = &stream{}
		d.streams[s] = st
	}
	return st
}

// Alloc reserves n bytes at a fresh address (addresses are never reused,
// so a stale pointer never aliases a new allocation).
func (d *Device) Alloc(n int64) (alloc.Ptr, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if n <= 0 {
		return 0, fmt.Errorf("fakedev: alloc of %d bytes", n)
	}
	if d.used+n > d.capacity {
		return 0, fmt.Errorf("%w: fakedev: %d bytes requested, %d of %d in use", alloc.ErrMemFull, n, d.used, d.capacity)
	}
	p := d.next
	d.next += alloc.Ptr((n + Granule - 1) / Granule * Granule)
	d.allocs[p] = &allocation{n: n, owner: make([]int, (n+Granule-1)/Granule)}
	d.bases = append(d.bases, p)
	d.used += n
	return p, nil
}

// Free releases an allocation; its ownership records go with it. Like
// cuMemFree, it first waits for the device: every stream runs to the end.
func (d *Device) Free(p alloc.Ptr) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.runAll()
	a, ok := d.allocs[p]
	if !ok {
		return fmt.Errorf("fakedev: free of %#x, which is not allocated", p)
	}
	delete(d.allocs, p)
	i := sort.Search(len(d.bases), func(i int) bool { return d.bases[i] >= p })
	d.bases = append(d.bases[:i], d.bases[i+1:]...)
	d.used -= a.n
	return nil
}

// Info reports free and total bytes.
func (d *Device) Info() (free, total int64, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.capacity - d.used, d.capacity, nil
}

// RecordEvent records a new event on s.
func (d *Device) RecordEvent(s alloc.Stream) (alloc.Event, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.FailRecord {
		return 0, fmt.Errorf("fakedev: record event on stream %#x: injected failure", s)
	}
	st := d.stream(s)
	e := d.nextEvent
	d.nextEvent++
	d.events[e] = &event{s: s, pos: st.executed + len(st.queue)}
	return e, nil
}

func (d *Device) event(e alloc.Event) (*event, error) {
	ev := d.events[e]
	if ev == nil {
		return nil, fmt.Errorf("fakedev: unknown event %d", e)
	}
	return ev, nil
}

func (d *Device) done(ev *event) bool { return d.stream(ev.s).executed >= ev.pos }

// EventDone reports whether e's stream has executed everything queued
// before e.
func (d *Device) EventDone(e alloc.Event) (bool, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	ev, err := d.event(e)
	if err != nil {
		return false, err
	}
	return d.done(ev), nil
}

// SyncEvent runs e's stream (and any stream it waits on) until e is done.
func (d *Device) SyncEvent(e alloc.Event) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	ev, err := d.event(e)
	if err != nil {
		return err
	}
	d.runTo(ev.s, ev.pos)
	return nil
}

// DestroyEvent forgets e.
func (d *Device) DestroyEvent(e alloc.Event) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, err := d.event(e); err != nil {
		return err
	}
	delete(d.events, e)
	return nil
}

// Claim enqueues on s: the n bytes at p now belong to tag.
func (d *Device) Claim(s alloc.Stream, p alloc.Ptr, n int64, tag int) {
	d.enqueue(s, op{kind: opClaim, ptr: p, n: n, tag: tag})
}

// Use enqueues on s a use of the n bytes at p by tag; if they belong to
// another tag when it runs, that is a violation.
func (d *Device) Use(s alloc.Stream, p alloc.Ptr, n int64, tag int) {
	d.enqueue(s, op{kind: opUse, ptr: p, n: n, tag: tag})
}

// Wait enqueues on s a wait for e (cuStreamWaitEvent).
func (d *Device) Wait(s alloc.Stream, e alloc.Event) error {
	d.mu.Lock()
	ev, err := d.event(e)
	d.mu.Unlock()
	if err != nil {
		return err
	}
	d.enqueue(s, op{kind: opWait, ev: ev})
	return nil
}

func (d *Device) enqueue(s alloc.Stream, o op) {
	d.mu.Lock()
	defer d.mu.Unlock()
	st := d.stream(s)
	st.queue = append(st.queue, o)
}

// Step executes the next operation of s, if any and not blocked on an
// event; it reports whether it executed one.
func (d *Device) Step(s alloc.Stream) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.step(s)
}

func (d *Device) step(s alloc.Stream) bool {
	st := d.stream(s)
	if len(st.queue) == 0 {
		return false
	}
	o := st.queue[0]
	switch o.kind {
	case opWait:
		if !d.done(o.ev) {
			return false
		}
	case opClaim:
		if owner := d.owners(o.ptr, o.n); owner != nil {
			for i := range owner {
				owner[i] = o.tag
			}
		} else {
			d.violations = append(d.violations, fmt.Sprintf("stream %#x: claim by %d of %#x (+%d): not allocated", s, o.tag, o.ptr, o.n))
		}
	case opUse:
		owner := d.owners(o.ptr, o.n)
		if owner == nil {
			d.violations = append(d.violations, fmt.Sprintf("stream %#x: use by %d of %#x (+%d): not allocated", s, o.tag, o.ptr, o.n))
			break
		}
		for _, t := range owner {
			if t != o.tag {
				d.violations = append(d.violations, fmt.Sprintf("stream %#x: use by %d of %#x (+%d) found owner %d", s, o.tag, o.ptr, o.n, t))
				break
			}
		}
	}
	st.queue = st.queue[1:]
	st.executed++
	return true
}

// owners returns the owner tags of the granules of [p, p+n), or nil when
// the range is not inside one live allocation.
func (d *Device) owners(p alloc.Ptr, n int64) []int {
	i := sort.Search(len(d.bases), func(i int) bool { return d.bases[i] > p }) - 1
	if i < 0 {
		return nil
	}
	base := d.bases[i]
	a := d.allocs[base]
	if p+alloc.Ptr(n) > base+alloc.Ptr(a.n) {
		return nil
	}
	first := int64(p-base) / Granule
	last := (int64(p-base) + n + Granule - 1) / Granule
	return a.owner[first:last]
}

// runTo executes s until it has executed pos ops, running the streams its
// waits depend on first.
func (d *Device) runTo(s alloc.Stream, pos int) {
	st := d.stream(s)
	for st.executed < pos && len(st.queue) > 0 {
		if o := st.queue[0]; o.kind == opWait && !d.done(o.ev) {
			d.runTo(o.ev.s, o.ev.pos)
		}
		d.step(s)
	}
}

// Run executes everything queued on s (and what its waits need).
func (d *Device) Run(s alloc.Stream) {
	d.mu.Lock()
	defer d.mu.Unlock()
	st := d.stream(s)
	d.runTo(s, st.executed+len(st.queue))
}

// RunAll runs every stream to completion, in stream order.
func (d *Device) RunAll() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.runAll()
}

func (d *Device) runAll() {
	ids := make([]alloc.Stream, 0, len(d.streams))
	for s := range d.streams {
		ids = append(ids, s)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	for _, s := range ids {
		st := d.streams[s]
		d.runTo(s, st.executed+len(st.queue))
	}
}

// Queued is the number of operations waiting on s.
func (d *Device) Queued(s alloc.Stream) int {
	return locked(d, func() int { return len(d.stream(s).queue) })
}

// Used is the number of bytes allocated; Allocations the number of live
// allocations; Events the number of live events.
func (d *Device) Used() int64 { return locked(d, func() int64 { return d.used }) }

// Allocations is the number of live allocations.
func (d *Device) Allocations() int { return locked(d, func() int { return len(d.allocs) }) }

// Events is the number of events not destroyed.
func (d *Device) Events() int { return locked(d, func() int { return len(d.events) }) }

// Violations returns the uses that found memory owned by another tag.
func (d *Device) Violations() []string {
	return locked(d, func() []string { return append([]string(nil), d.violations...) })
}

// locked returns read() of d's state, read under d's lock.
func locked[T any](d *Device, read func() T) T {
	d.mu.Lock()
	defer d.mu.Unlock()
	return read()
}
