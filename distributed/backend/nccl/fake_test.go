package nccl

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sync"
	"unsafe"

	"github.com/cohortml/cohort/device/nccl"
	"github.com/cohortml/cohort/distributed/collective"
)

// A fake NCCL for the host tests: device memory is host memory, a stream
// is a goroutine running its work in order (so enqueueing returns at once
// and completion is asynchronous, as on a GPU), and a communicator's
// collectives meet the other ranks' in a world shared by the goroutines
// that joined it with one unique id. Sends are buffered (NCCL's small
// sends complete before their receive) and match receives in order per
// pair. Abort makes the world's pending and later ops fail at once.

type fakeDev struct {
	ord int
	bus string

	mu      sync.Mutex
	allocs  map[Ptr][]byte
	streams map[Stream]*fakeStream
	events  map[Event]*fakeEvent
	next    uintptr
	hang    bool // collectives never complete (a stuck peer)
}

type fakeStream struct {
	work chan func()
	quit chan struct{}
	done chan struct{}
}

type fakeEvent struct{ fired chan struct{} }

func newFakeDev(ord int, bus string) *fakeDev {
	return &fakeDev{ord: ord, bus: bus, allocs: map[Ptr][]byte{}, streams: map[Stream]*fakeStream{}, events: map[Event]*fakeEvent{}}
}

func (d *fakeDev) Ordinal() int  { return d.ord }
func (d *fakeDev) BusID() string { return d.bus }

func (d *fakeDev) Alloc(n int64) (Ptr, error) {
	b := make([]byte, n+1) // +1: a zero-length buffer has an address too
	p := Ptr(uintptr(unsafe.Pointer(&b[0])))
	d.mu.Lock()
	d.allocs[p] = b
	d.mu.Unlock()
	return p, nil
}

func (d *fakeDev) Free(p Ptr) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := d.allocs[p]; !ok {
		return fmt.Errorf("fake: free of %#x, not allocated", p)
	}
	delete(d.allocs, p)
	return nil
}

// adopt makes b device memory of d, as a fake device tensor's buffer is
// to the real backend (its DevicePtr): never freed.
func (d *fakeDev) adopt(b []byte) {
	if len(b) == 0 {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.allocs[Ptr(uintptr(unsafe.Pointer(&b[0])))] = b
}

// mem returns n bytes of device memory at p (inside an allocation).
func (d *fakeDev) mem(p Ptr, n int) []byte {
	if n == 0 {
		return nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for base, b := range d.allocs {
		if p >= base && uintptr(p)+uintptr(n) <= uintptr(base)+uintptr(len(b)) {
			off := int(p - base)
			return b[off : off+n]
		}
	}
	panic(fmt.Sprintf("fake: %d bytes at %#x are not device memory", n, p))
}

func (d *fakeDev) enqueue(s Stream, f func()) error {
	d.mu.Lock()
	st := d.streams[s]
	d.mu.Unlock()
	if st == nil {
		return fmt.Errorf("fake: no stream %#x", s)
	}
	st.work <- f
	return nil
}

func (d *fakeDev) CopyIn(dst Ptr, src []byte, s Stream) error {
	return d.enqueue(s, func() { copy(d.mem(dst, len(src)), src) })
}

func (d *fakeDev) CopyOut(dst []byte, src Ptr, s Stream) error {
	return d.enqueue(s, func() { copy(dst, d.mem(src, len(dst))) })
}

func (d *fakeDev) NewStream() (Stream, error) {
	st := &fakeStream{work: make(chan func(), 4096), quit: make(chan struct{}), done: make(chan struct{})}
	d.mu.Lock()
	d.next++
	s := Stream(d.next)
	d.streams[s] = st
	d.mu.Unlock()
	go func() {
		defer close(st.done)
		for {
			select {
			case f := <-st.work:
				f()
			case <-st.quit:
				return
			}
		}
	}()
	return s, nil
}

func (d *fakeDev) DestroyStream(s Stream) error {
	d.mu.Lock()
	st := d.streams[s]
	delete(d.streams, s)
	d.mu.Unlock()
	if st == nil {
		return fmt.Errorf("fake: no stream %#x", s)
	}
	close(st.quit)
	<-st.done
	return nil
}

func (d *fakeDev) NewEvent() (Event, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.next++
	e := Event(d.next)
	d.events[e] = &fakeEvent{}
	return e, nil
}

func (d *fakeDev) event(e Event) *fakeEvent {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.events[e]
}

func (d *fakeDev) DestroyEvent(e Event) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.events, e)
	return nil
}

func (d *fakeDev) Record(e Event, s Stream) error {
	ch := make(chan struct{})
	d.mu.Lock()
	d.events[e].fired = ch
	d.mu.Unlock()
	return d.enqueue(s, func() { close(ch) })
}

func (d *fakeDev) StreamWaitEvent(s Stream, e Event) error {
	d.mu.Lock()
	ch := d.events[e].fired
	d.mu.Unlock()
	if ch == nil {
		return nil
	}
	return d.enqueue(s, func() { <-ch })
}

func (d *fakeDev) EventDone(e Event) (bool, error) {
	ev := d.event(e)
	if ev == nil || ev.fired == nil {
		return false, errors.New("fake: event not recorded")
	}
	d.mu.Lock()
	ch := ev.fired
	d.mu.Unlock()
	select {
	case <-ch:
		return true, nil
	default:
		return false, nil
	}
}

// fakeNet is the process's fake NCCL: worlds by unique id.
type fakeNet struct {
	mu     sync.Mutex
	worlds map[nccl.UniqueID]*fakeWorld
	hang   bool // every world's collectives wait for ever (until aborted)
}

type fakeWorld struct {
	n      int
	mu     sync.Mutex
	joined int
	ready  chan struct{}
	colls  map[int]*meeting
	pipes  map[[2]int]chan []byte // from, to
	abort  chan struct{}
	once   sync.Once
	hang   bool
}

// meeting is one collective: every rank's contribution, by rank.
type meeting struct {
	sends [][]byte
	left  int
	all   chan struct{}
}

// fakeJoiner joins worlds on one rank's device.
type fakeJoiner struct {
	net *fakeNet
	dev *fakeDev
}

func (j fakeJoiner) NewID() (nccl.UniqueID, error) {
	var id nccl.UniqueID
	_, err := rand.Read(id.Internal[:])
	return id, err
}

func (j fakeJoiner) Join(ctx context.Context, id nccl.UniqueID, n, rank int) (Comm, error) {
	j.net.mu.Lock()
	if j.net.worlds == nil {
		j.net.worlds = map[nccl.UniqueID]*fakeWorld{}
	}
	w := j.net.worlds[id]
	if w == nil {
		w = &fakeWorld{n: n, ready: make(chan struct{}), colls: map[int]*meeting{}, pipes: map[[2]int]chan []byte{}, abort: make(chan struct{}), hang: j.net.hang}
		j.net.worlds[id] = w
	}
	j.net.mu.Unlock()
	w.mu.Lock()
	if w.n != n {
		w.mu.Unlock()
		return nil, fmt.Errorf("fake: ncclCommInitRank: %d ranks, the world has %d", n, w.n)
	}
	w.joined++
	if w.joined == n {
		close(w.ready)
	}
	w.mu.Unlock()
	select { // ncclCommInitRank blocks until every rank has joined
	case <-w.ready:
	case <-w.abort:
		select {
		case <-w.ready: // every rank joined, then one aborted: joined all the same
		default:
			return nil, errors.New("fake: aborted while joining")
		}
	case <-ctx.Done():
		return nil, fmt.Errorf("fake: ncclCommInitRank: %w", ctx.Err())
	}
	return &fakeComm{w: w, d: j.dev, rank: rank}, nil
}

type fakeComm struct {
	w     *fakeWorld
	d     *fakeDev
	rank  int
	mu    sync.Mutex
	k     int // collectives enqueued
	async error
}

var errFakeAborted = &nccl.Error{Call: "async error", Code: nccl.RemoteError, Msg: "remote process exited or there was a network error"}

func (c *fakeComm) AsyncError() error {
	select {
	case <-c.w.abort:
		return errFakeAborted
	default:
		return nil
	}
}

func (c *fakeComm) Abort() error {
	c.w.once.Do(func() { close(c.w.abort) })
	return nil
}

func (c *fakeComm) Destroy() error    { return nil }
func (c *fakeComm) GroupStart() error { return nil }
func (c *fakeComm) GroupEnd() error   { return nil }
func (c *fakeComm) aborted() bool     { return c.AsyncError() != nil }

// collective enqueues the k-th collective: contribute send's bytes, wait
// for every rank's, then compute this rank's result with f.
func (c *fakeComm) collective(send Ptr, sendBytes int, s Stream, f func(all [][]byte)) error {
	c.mu.Lock()
	k := c.k
	c.k++
	c.mu.Unlock()
	return c.d.enqueue(s, func() {
		w := c.w
		mine := append([]byte(nil), c.d.mem(send, sendBytes)...)
		w.mu.Lock()
		m := w.colls[k]
		if m == nil {
			m = &meeting{sends: make([][]byte, w.n), left: w.n, all: make(chan struct{})}
			w.colls[k] = m
		}
		m.sends[c.rank] = mine
		m.left--
		if m.left == 0 && !w.hang {
			close(m.all)
		}
		w.mu.Unlock()
		select {
		case <-m.all:
			f(m.sends)
		case <-w.abort: // NCCL's kernels return after ncclCommAbort
		}
	})
}

func (c *fakeComm) AllReduce(send, recv Ptr, n int, dt nccl.DataType, op nccl.RedOp, s Stream) error {
	return c.collective(send, n*dt.Size(), s, func(all [][]byte) {
		reduceInto(c.d.mem(recv, n*dt.Size()), all, 0, n, dt, op)
	})
}

func (c *fakeComm) Broadcast(send, recv Ptr, n int, dt nccl.DataType, root int, s Stream) error {
	return c.collective(send, n*dt.Size(), s, func(all [][]byte) { copy(c.d.mem(recv, n*dt.Size()), all[root]) })
}

func (c *fakeComm) Reduce(send, recv Ptr, n int, dt nccl.DataType, op nccl.RedOp, root int, s Stream) error {
	return c.collective(send, n*dt.Size(), s, func(all [][]byte) {
		if c.rank == root {
			reduceInto(c.d.mem(recv, n*dt.Size()), all, 0, n, dt, op)
		}
	})
}

func (c *fakeComm) AllGather(send, recv Ptr, n int, dt nccl.DataType, s Stream) error {
	return c.collective(send, n*dt.Size(), s, func(all [][]byte) {
		out := c.d.mem(recv, len(all)*n*dt.Size())
		for r, b := range all {
			copy(out[r*n*dt.Size():], b)
		}
	})
}

func (c *fakeComm) ReduceScatter(send, recv Ptr, n int, dt nccl.DataType, op nccl.RedOp, s Stream) error {
	return c.collective(send, c.w.n*n*dt.Size(), s, func(all [][]byte) {
		reduceInto(c.d.mem(recv, n*dt.Size()), all, c.rank*n, n, dt, op)
	})
}

func (c *fakeComm) pipe(from, to int) chan []byte {
	c.w.mu.Lock()
	defer c.w.mu.Unlock()
	k := [2]int{from, to}
	if c.w.pipes[k] == nil {
		c.w.pipes[k] = make(chan []byte, 1<<10)
	}
	return c.w.pipes[k]
}

func (c *fakeComm) Send(p Ptr, n int, dt nccl.DataType, peer int, s Stream) error {
	ch := c.pipe(c.rank, peer)
	return c.d.enqueue(s, func() { ch <- append([]byte(nil), c.d.mem(p, n*dt.Size())...) })
}

func (c *fakeComm) Recv(p Ptr, n int, dt nccl.DataType, peer int, s Stream) error {
	ch := c.pipe(peer, c.rank)
	return c.d.enqueue(s, func() {
		select {
		case b := <-ch:
			copy(c.d.mem(p, n*dt.Size()), b)
		case <-c.w.abort:
		}
	})
}

// combine folds v, rank r's element, into acc as op does (rank 0's
// starts it; Avg sums, divided afterwards).
func combine[T int64 | float64](acc, v T, r int, op nccl.RedOp) T {
	switch {
	case r == 0:
		return v
	case op == nccl.Sum || op == nccl.Avg:
		return acc + v
	case op == nccl.Prod:
		return acc * v
	case op == nccl.Max:
		return max(acc, v)
	case op == nccl.Min:
		return min(acc, v)
	}
	return acc
}

// reduceInto reduces elements [off, off+n) of every rank's bytes into out.
func reduceInto(out []byte, all [][]byte, off, n int, dt nccl.DataType, op nccl.RedOp) {
	sz := dt.Size()
	for i := range n {
		var acc float64
		var iacc int64
		for r, b := range all {
			e := b[(off+i)*sz : (off+i+1)*sz]
			if dt == nccl.Int64 {
				iacc = combine(iacc, int64(binary.LittleEndian.Uint64(e)), r, op)
				continue
			}
			acc = combine(acc, load(e, dt), r, op)
		}
		dst := out[i*sz : (i+1)*sz]
		if dt == nccl.Int64 {
			if op == nccl.Avg {
				iacc /= int64(len(all))
			}
			binary.LittleEndian.PutUint64(dst, uint64(iacc))
			continue
		}
		if op == nccl.Avg {
			acc /= float64(len(all))
		}
		storeElem(dst, dt, acc)
	}
}

func load(e []byte, dt nccl.DataType) float64 {
	switch dt {
	case nccl.Float32:
		return float64(math.Float32frombits(binary.LittleEndian.Uint32(e)))
	case nccl.Float64:
		return math.Float64frombits(binary.LittleEndian.Uint64(e))
	case nccl.BFloat16:
		return float64(collective.BF16ToFloat32(binary.LittleEndian.Uint16(e)))
	case nccl.Float16:
		return float64(collective.FP16ToFloat32(binary.LittleEndian.Uint16(e)))
	}
	panic("fake: dtype")
}

func storeElem(e []byte, dt nccl.DataType, v float64) {
	switch dt {
	case nccl.Float32:
		binary.LittleEndian.PutUint32(e, math.Float32bits(float32(v)))
	case nccl.Float64:
		binary.LittleEndian.PutUint64(e, math.Float64bits(v))
	case nccl.BFloat16:
		binary.LittleEndian.PutUint16(e, collective.BF16FromFloat32(float32(v)))
	case nccl.Float16:
		binary.LittleEndian.PutUint16(e, collective.FP16FromFloat32(float32(v)))
	}
}
