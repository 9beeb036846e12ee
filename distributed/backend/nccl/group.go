package nccl

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"time"

	"github.com/cohortml/cohort/device/nccl"
	"github.com/cohortml/cohort/distributed"
	"github.com/cohortml/cohort/distributed/collective"
	"github.com/cohortml/cohort/distributed/flight"
	"github.com/cohortml/cohort/distributed/store"
)

// group is one communicator and the two goroutines that drive it: the
// issuer enqueues each op on the communication stream in issue order
// (staging host buffers through device memory, after an event of the
// compute stream when one is set), and the completer waits for each op's
// completion event in the same order, polling the communicator's async
// error and the op's deadline meanwhile. A failure, a timeout or an
// ended context breaks the group: ncclCommAbort runs once (so that
// kernels waiting on a dead peer return and the survivors unblock), the
// op fails with an *distributed.OpError naming op, seq and rank, and every
// later op fails wrapping it.
//
// Invariant: ops reach the issuer, the stream and the completer in seq
// order, so their Works complete in issue order.
type group struct {
	dev     Device
	joiner  Joiner
	comm    Comm
	stream  Stream // the communication stream
	st      store.Store
	prefix  string // this group's store keys
	rank    int    // in the group
	ranks   []int  // the members' global ranks, by group rank
	me      int    // this process's global rank
	id      uint32 // the flight recorder's group id
	timeout time.Duration

	ctx    context.Context // ends when the group closes
	cancel context.CancelFunc
	wake   chan struct{} // the issuer's: the queue has grown (capacity 1)
	issued chan *op      // issuer → completer
	wg     sync.WaitGroup

	mu         sync.Mutex
	queue      []*op // submitted, not yet taken by the issuer (seq order)
	seq        uint64
	p2p        map[p2pKey]uint32
	compute    Stream // ordered before every op when set (SetComputeStream)
	computeEv  Event
	broken     error // the *OpError that broke the group
	closed     bool
	children   []*group
	nchild     int
	abortOnce  sync.Once
	unfinished bool // an op was still running when the group closed

	flight recorder

	closeLast func() error // the store handed over by Options.CloseStore

	wd *watchdog // set once by watch

	evMu        sync.RWMutex // WaitStream's use of an op's event against its destruction
	closeDevice func() error // the world group's: releases the GPU context after the streams

	poolMu sync.Mutex
	pool   map[int64][]Ptr // staging buffers by size class, reused across ops
}

// stageClass rounds a staging size up to its class: a power of two, at
// least 4 KiB, so that buffers are reused across ops of similar sizes
// (cuMemFree synchronises the device, so freeing per op would serialise
// communication with compute).
func stageClass(n int64) int64 {
	c := int64(4 << 10)
	for c < n {
		c <<= 1
	}
	return c
}

// stage returns a staging buffer of at least n bytes.
func (g *group) stage(n int64) (Ptr, int64, error) {
	c := stageClass(n)
	g.poolMu.Lock()
	if l := g.pool[c]; len(l) > 0 {
		p := l[len(l)-1]
		g.pool[c] = l[:len(l)-1]
		g.poolMu.Unlock()
		return p, c, nil
	}
	g.poolMu.Unlock()
	p, err := g.dev.Alloc(c)
	return p, c, err
}

// freePool frees the pooled staging buffers (Close, after the stream).
func (g *group) freePool() {
	g.poolMu.Lock()
	defer g.poolMu.Unlock()
	for _, l := range g.pool {
		for _, p := range l {
			_ = g.dev.Free(p)
		}
	}
	g.pool = nil
}

type p2pKey struct {
	peer, tag int
	recv      bool
}

// op is one enqueued op.
type op struct {
	kind  collective.Kind
	seq   uint64
	peer  int // group rank of the root or the other side, −1 if none
	tag   int // of a send or recv
	bytes int64
	ctx   context.Context
	// in is staged to a device buffer of len(in) bytes and out filled from
	// one of outBytes bytes; inPlace uses one buffer for both (out aliases
	// in). dIn and dOut instead name device buffers the caller owns.
	in, out    []byte
	outBytes   int64
	inPlace    bool
	dIn, dOut  Ptr
	launch     func(c Comm, in, out Ptr, s Stream) error
	post       func() // host fix-up once out is filled
	bufs       []Ptr  // staging buffers, back to the pool when the op completes
	classes    []int64
	ev         Event
	issuedOnce chan struct{} // closed once enqueued (or failed)
	done       chan struct{}
	err        error
	bad        error  // the call's validation error: it fails and breaks the group
	slot       uint64 // flight ring slot
	deadline   time.Time
}

// work is an op's Work.
type work struct {
	o *op
	g *group
}

func (w work) Wait() error           { <-w.o.done; return w.o.err }
func (w work) Done() <-chan struct{} { return w.o.done }

// WaitStream makes stream s wait for the op on the device, without the
// host waiting for the op itself (only for its being enqueued): the
// compute stream goes on with the op's result, as PyTorch's Work.wait()
// on NCCL does. It returns the op's error if the op failed before it was
// enqueued.
func (w work) WaitStream(s Stream) error {
	select {
	case <-w.o.issuedOnce:
	case <-w.o.done:
	}
	w.g.evMu.RLock() // the completer destroys the event under evMu
	defer w.g.evMu.RUnlock()
	select {
	case <-w.o.done:
		return w.o.err
	default:
	}
	return w.g.dev.StreamWaitEvent(s, w.o.ev)
}

// BackendName is the name the backend is registered under (distributed.BackendName).
func (g *group) BackendName() string { return "nccl" }

// Rank and Size place this rank in the group.
func (g *group) Rank() int { return g.rank }
func (g *group) Size() int { return len(g.ranks) }

// SetComputeStream orders every later op after the work enqueued on s
// before it (an event recorded on s, waited for by the communication
// stream): collectives read what the compute stream wrote.
func (g *group) SetComputeStream(s Stream) {
	g.mu.Lock()
	g.compute = s
	g.mu.Unlock()
}

// start runs the group's goroutines.
func (g *group) start() {
	g.ctx, g.cancel = context.WithCancel(context.Background())
	g.wake = make(chan struct{}, 1)
	g.issued = make(chan *op, 1024)
	g.p2p = make(map[p2pKey]uint32)
	g.wg.Add(2)
	go g.issuer()
	go g.completer()
}

// submit assigns o its seq, records it and hands it to the issuer; bad
// is the validation error of the call (it breaks the group, as in the
// native backend, so that every rank fails it the same way).
func (g *group) submit(ctx context.Context, o *op, bad error) distributed.Work {
	o.ctx = ctx
	o.done = make(chan struct{})
	o.issuedOnce = make(chan struct{})
	g.mu.Lock()
	if o.kind == collective.Send || o.kind == collective.Recv {
		k := p2pKey{o.peer, o.tag, o.kind == collective.Recv}
		g.p2p[k]++
		o.seq = flight.P2P | uint64(uint32(k.tag)&^(1<<31))<<32 | uint64(g.p2p[k])
	} else {
		g.seq++
		o.seq = g.seq
	}
	g.flight.enqueue(g, o)
	if g.closed {
		g.mu.Unlock()
		g.finish(o, &distributed.OpError{Op: o.kind.String(), Seq: o.seq, Rank: g.me, Peer: -1, Err: distributed.ErrClosed})
		return work{o, g}
	}
	// An invalid call goes through the queue too, so that it breaks the
	// group after the ops issued before it, and completes after them.
	o.bad = bad
	g.queue = append(g.queue, o)
	g.mu.Unlock()
	select {
	case g.wake <- struct{}{}:
	default:
	}
	return work{o, g}
}

// breakWith marks the group broken by o (the first failure wins), aborts
// the communicator once, and returns o's error.
func (g *group) breakWith(o *op, cause error, peer int) error {
	g.mu.Lock()
	first := g.broken == nil
	if first {
		g.broken = &distributed.OpError{Op: o.kind.String(), Seq: o.seq, Rank: g.me, Peer: peer, Err: cause}
	}
	broken := g.broken
	g.mu.Unlock()
	if first {
		g.abort()
	}
	if o.seq == broken.(*distributed.OpError).Seq && first {
		return broken
	}
	return &distributed.OpError{Op: o.kind.String(), Seq: o.seq, Rank: g.me, Peer: -1, Err: broken}
}

// abort aborts the communicator once: NCCL's kernels return, the stream
// drains, and every rank blocked with this one on a dead peer unblocks.
func (g *group) abort() {
	g.abortOnce.Do(func() {
		if g.comm != nil {
			_ = g.comm.Abort()
		}
	})
}

// brokenErr returns the error for o in a broken or closed group, or nil.
func (g *group) brokenErr(o *op) error {
	g.mu.Lock()
	broken, closed := g.broken, g.closed
	g.mu.Unlock()
	switch {
	case broken != nil:
		return &distributed.OpError{Op: o.kind.String(), Seq: o.seq, Rank: g.me, Peer: -1, Err: broken}
	case closed:
		return &distributed.OpError{Op: o.kind.String(), Seq: o.seq, Rank: g.me, Peer: -1, Err: distributed.ErrClosed}
	}
	return nil
}

func (g *group) finish(o *op, err error) {
	o.err = err
	g.flight.end(o, err)
	select {
	case <-o.issuedOnce:
	default:
		close(o.issuedOnce)
	}
	close(o.done)
}

// issuer enqueues ops on the communication stream in seq order.
//
// It keeps one OS thread: NCCL's group calls (GroupStart … GroupEnd) are
// per thread.
func (g *group) issuer() {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	defer g.wg.Done()
	defer close(g.issued)
	for {
		if g.ctx.Err() != nil {
			return // Close fails what is left in the queue
		}
		var o *op
		g.mu.Lock()
		if len(g.queue) > 0 {
			o = g.queue[0]
			g.queue[0] = nil
			g.queue = g.queue[1:]
		}
		g.mu.Unlock()
		if o == nil {
			select {
			case <-g.wake:
			case <-g.ctx.Done():
			}
			continue
		}
		if o.bad != nil {
			g.finish(o, g.breakWith(o, o.bad, -1))
			continue
		}
		if err := g.brokenErr(o); err != nil {
			g.finish(o, err)
			continue
		}
		if err := o.ctx.Err(); err != nil {
			g.finish(o, g.breakWith(o, fmt.Errorf("before it was enqueued: %w", err), -1))
			continue
		}
		o.deadline = time.Now().Add(g.timeout)
		if d, ok := o.ctx.Deadline(); ok && d.Before(o.deadline) {
			o.deadline = d
		}
		g.flight.start(o)
		if err := g.enqueue(o); err != nil {
			g.release(o, true)
			g.finish(o, g.breakWith(o, err, -1))
			continue
		}
		close(o.issuedOnce)
		g.issued <- o
	}
}

// drain fails the ops left in the queue when the group closes.
func (g *group) drain() {
	g.mu.Lock()
	left := g.queue
	g.queue = nil
	g.mu.Unlock()
	for _, o := range left {
		g.finish(o, &distributed.OpError{Op: o.kind.String(), Seq: o.seq, Rank: g.me, Peer: -1, Err: distributed.ErrClosed})
	}
}

// enqueue stages o's input, orders it after the compute stream, launches
// it and stages its output, all on the communication stream, then
// records its completion event.
func (g *group) enqueue(o *op) error {
	d, s := g.dev, g.stream
	in, out := o.dIn, o.dOut
	if o.in != nil || o.out != nil || o.outBytes > 0 {
		var err error
		if n := int64(len(o.in)); n > 0 {
			var c int64
			if in, c, err = g.stage(n); err != nil {
				return err
			}
			o.bufs, o.classes = append(o.bufs, in), append(o.classes, c)
			if err := d.CopyIn(in, o.in, s); err != nil {
				return err
			}
		}
		if o.inPlace {
			out = in
		} else if o.outBytes > 0 {
			var c int64
			if out, c, err = g.stage(o.outBytes); err != nil {
				return err
			}
			o.bufs, o.classes = append(o.bufs, out), append(o.classes, c)
		}
	}
	g.mu.Lock()
	compute := g.compute
	g.mu.Unlock()
	if compute != 0 {
		if g.computeEv == 0 {
			ev, err := d.NewEvent()
			if err != nil {
				return err
			}
			g.computeEv = ev
		}
		if err := d.Record(g.computeEv, compute); err != nil {
			return err
		}
		if err := d.StreamWaitEvent(s, g.computeEv); err != nil {
			return err
		}
	}
	if err := o.launch(g.comm, in, out, s); err != nil {
		return err
	}
	if len(o.out) > 0 {
		if err := d.CopyOut(o.out, out, s); err != nil {
			return err
		}
	}
	ev, err := d.NewEvent()
	if err != nil {
		return err
	}
	o.ev = ev
	return d.Record(ev, s)
}

// release returns o's staging buffers to the pool and, with event, frees
// its event.
func (g *group) release(o *op, event bool) {
	g.poolMu.Lock()
	if g.pool == nil {
		g.pool = make(map[int64][]Ptr)
	}
	for i, p := range o.bufs {
		g.pool[o.classes[i]] = append(g.pool[o.classes[i]], p)
	}
	g.poolMu.Unlock()
	o.bufs, o.classes = nil, nil
	if event && o.ev != 0 {
		g.evMu.Lock()
		_ = g.dev.DestroyEvent(o.ev)
		g.evMu.Unlock()
	}
}

// pollMin and pollMax bound the completer's polling interval: it starts
// short (a small collective completes in tens of µs) and backs off.
const (
	pollMin = 20 * time.Microsecond
	pollMax = 2 * time.Millisecond
)

// completer waits for each enqueued op in seq order.
func (g *group) completer() {
	defer g.wg.Done()
	for o := range g.issued {
		err := g.await(o)
		if err != nil {
			if errors.Is(err, distributed.ErrClosed) {
				g.mu.Lock()
				g.unfinished = true
				g.mu.Unlock()
				o.bufs = nil // the stream may still use them: left to the abort
				g.finish(o, &distributed.OpError{Op: o.kind.String(), Seq: o.seq, Rank: g.me, Peer: -1, Err: distributed.ErrClosed})
				continue
			}
			g.finish(o, g.breakWith(o, err, -1))
			continue
		}
		g.release(o, false) // the event is destroyed below, once done is closed (WaitStream checks done first)
		if o.post != nil {
			o.post()
		}
		g.finish(o, nil)
		g.evMu.Lock()
		_ = g.dev.DestroyEvent(o.ev)
		g.evMu.Unlock()
	}
}

// await polls o's completion event, the communicator's async error, o's
// deadline and context, and the group's closing.
func (g *group) await(o *op) error {
	wait := pollMin
	t := time.NewTimer(wait)
	defer t.Stop()
	for {
		// The async error first: after an abort (here or, through NCCL,
		// a peer's death) the kernels return and the event fires, but the
		// op did not complete.
		if err := g.comm.AsyncError(); err != nil {
			var ne *nccl.Error
			if !errors.As(err, &ne) || ne.Code != nccl.InProgress {
				return fmt.Errorf("communicator failed: %w", err)
			}
		}
		done, err := g.dev.EventDone(o.ev)
		if err != nil {
			return err
		}
		if done {
			return nil
		}
		if g.brokenNow() {
			return errors.New("aborted while running")
		}
		now := time.Now()
		if now.After(o.deadline) {
			return fmt.Errorf("timed out after %v (COHORT_TIMEOUT or the op's context): a peer is dead or stuck; the communicator was aborted", now.Sub(o.deadline.Add(-g.timeout)).Round(time.Millisecond))
		}
		if err := o.ctx.Err(); err != nil {
			return fmt.Errorf("while running: %w", err)
		}
		t.Reset(wait)
		select {
		case <-t.C:
		case <-g.ctx.Done():
			return distributed.ErrClosed
		}
		wait = min(2*wait, pollMax)
	}
}

func (g *group) brokenNow() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.broken != nil
}

// Close closes the group's subgroups, fails its pending ops with
// ErrClosed and frees the communicator: destroyed when idle, aborted when
// an op was still in flight.
func (g *group) Close() error {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return nil
	}
	g.closed = true
	children := g.children
	g.mu.Unlock()
	for _, c := range children {
		c.Close()
	}
	g.cancel()
	g.wg.Wait()
	g.drain()
	var err error
	g.mu.Lock()
	broken := g.broken != nil || g.unfinished
	g.mu.Unlock()
	if !broken {
		err = g.comm.Destroy()
	} else {
		g.abort()
	}
	_ = g.dev.DestroyStream(g.stream)
	if !broken {
		g.freePool() // an aborted stream may still hold them: left to the process
	}
	if g.computeEv != 0 {
		_ = g.dev.DestroyEvent(g.computeEv)
	}
	if g.closeDevice != nil {
		_ = g.closeDevice()
	}
	if g.closeLast != nil {
		if e := g.closeLast(); err == nil && e != nil {
			return fmt.Errorf("distributed: rank %d: close: %w", g.me, e)
		}
	}
	if err != nil {
		return fmt.Errorf("distributed: rank %d: close: %w", g.me, err)
	}
	return nil
}
