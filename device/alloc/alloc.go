package alloc

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"sync"
)

// Ptr is a device address.
type Ptr uint64

// Stream identifies a stream (a CUstream handle; 0 is the default stream).
type Stream uintptr

// Event identifies an event made by Mem.RecordEvent.
type Event uintptr

// Mem is the device memory and event machinery the allocator sits on. The
// real one is [CUDA]; tests use fakedev. Calls are made with the
// allocator's lock held, one at a time.
type Mem interface {
	// Alloc returns n bytes of device memory, aligned to at least 512 bytes.
	// A device without room returns an error wrapping ErrMemFull.
	Alloc(n int64) (Ptr, error)
	// Free returns memory from Alloc to the device.
	Free(p Ptr) error
	// Info reports the device's free and total bytes.
	Info() (free, total int64, err error)
	// RecordEvent creates an event and records it on s: it completes when s
	// reaches the point of the call.
	RecordEvent(s Stream) (Event, error)
	// EventDone reports, without blocking, whether e has completed.
	EventDone(e Event) (bool, error)
	// SyncEvent blocks until e has completed.
	SyncEvent(e Event) error
	// DestroyEvent releases e.
	DestroyEvent(e Event) error
}

// ErrMemFull is wrapped by Mem.Alloc's error when the device has no room.
var ErrMemFull = errors.New("alloc: device memory full")

// ErrOutOfMemory is wrapped by the *OutOfMemoryError of a request that
// failed after the cache was freed.
var ErrOutOfMemory = errors.New("alloc: out of device memory")

// Sizes of the rounding and segment rules (PyTorch's
// CUDACachingAllocator: kMinBlockSize, kSmallSize, kSmallBuffer, kRoundLarge).
const (
	MinBlockBytes     = 512     // every block is a multiple of this
	SmallMaxBytes     = 1 << 20 // requests up to this come from small segments
	SmallSegmentBytes = 2 << 20 // the size of a small segment
	LargeRoundBytes   = 2 << 20 // a large segment is its request rounded up to this
)

// Block is one allocation. Its fields are read-only for the caller, who
// owns it from Alloc until Free.
type Block struct {
	ptr       Ptr
	size      int64 // rounded
	requested int64
	stream    Stream
	seg       *segment
	prev      *Block // neighbours in the segment, by address
	next      *Block
	state     blockState
	uses      []Stream // other streams the block was used on (RecordStream)
	events    []Event  // pending: one per use, recorded at Free
}

type blockState uint8

const (
	stateFree blockState = iota
	stateUsed
	statePending // freed, waiting for events on other streams
)

// Ptr is the block's device address (0 for a zero-byte block).
func (b *Block) Ptr() Ptr { return b.ptr }

// Size is the number of bytes requested.
func (b *Block) Size() int64 { return b.requested }

// Stream is the stream the block was allocated on.
func (b *Block) Stream() Stream { return b.stream }

// A Block must not be used after Free: the allocator may hand the same
// *Block to a later Alloc.

type segment struct {
	ptr    Ptr
	size   int64
	stream Stream
	small  bool
	head   *Block
}

type poolKey struct {
	stream Stream
	small  bool
}

// Stats are the allocator's counters, in bytes and counts, as PyTorch's
// torch.cuda.memory_stats reports them.
type Stats struct {
	AllocatedBytes     int64 // held by live blocks (rounded sizes)
	RequestedBytes     int64 // held by live blocks (requested sizes)
	ReservedBytes      int64 // held from the device in segments
	PeakAllocatedBytes int64
	PeakReservedBytes  int64
	PendingBytes       int64 // freed blocks waiting for other streams' events
	Allocs, Frees      int64 // Alloc and Free calls (zero-byte blocks included)
	Segments           int64 // segments held now
	DeviceAllocs       int64 // Mem.Alloc calls that succeeded
	DeviceFrees        int64 // Mem.Free calls
	CacheFlushes       int64 // times a failed Mem.Alloc made the allocator free its cache and retry
	OOMs               int64 // requests that failed with ErrOutOfMemory
}

// Allocator is a caching allocator over a Mem. It is safe for concurrent
// use; Alloc, Free and EmptyCache may block on the device (Mem.Alloc,
// Mem.Free, and, when memory is short, waiting for events).
type Allocator struct {
	mu       sync.Mutex
	mem      Mem
	pools    map[poolKey][]*Block // free blocks sorted by (size, ptr)
	segments map[Ptr]*segment
	pending  []*Block
	stats    Stats
}

// New returns an allocator over mem holding nothing.
func New(mem Mem) *Allocator {
	return &Allocator{mem: mem, pools: map[poolKey][]*Block{}, segments: map[Ptr]*segment{}}
}

func roundUp(n, m int64) int64 { return (n + m - 1) / m * m }

// RoundSize is the size a request of n bytes occupies.
func RoundSize(n int64) int64 {
	if n < MinBlockBytes {
		return MinBlockBytes
	}
	return roundUp(n, MinBlockBytes)
}

// segmentSize is the size of a new segment for a rounded request.
func segmentSize(size int64) int64 {
	if size <= SmallMaxBytes {
		return SmallSegmentBytes
	}
	return roundUp(size, LargeRoundBytes)
}

// Alloc returns a block of at least n bytes for use on stream s: a cached
// free block of s's pool if one fits (split when much larger), else a new
// segment from the device. When the device is full it waits for pending
// frees, returns every cached segment to the device and tries once more;
// then it fails with an *OutOfMemoryError. A zero-byte request gives a
// block with address 0 and holds no memory.
func (a *Allocator) Alloc(n int64, s Stream) (*Block, error) {
	if n < 0 {
		return nil, fmt.Errorf("alloc: negative size %d", n)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.stats.Allocs++
	if n == 0 {
		return &Block{stream: s, state: stateUsed}, nil
	}
	if err := a.processEvents(false); err != nil {
		return nil, err
	}
	size := RoundSize(n)
	key := poolKey{s, size <= SmallMaxBytes}
	b := a.take(key, size)
	if b == nil {
		var err error
		b, err = a.grow(key, size)
		if errors.Is(err, ErrMemFull) {
			// Wait for pending frees, then return the cache and retry once.
			a.stats.CacheFlushes++
			if err := a.processEvents(true); err != nil {
				return nil, err
			}
			if b = a.take(key, size); b != nil {
				err = nil
			} else {
				if err := a.releaseCached(); err != nil {
					return nil, err
				}
				b, err = a.grow(key, size)
			}
		}
		if errors.Is(err, ErrMemFull) {
			a.stats.OOMs++
			return nil, a.oomError(n, s, err)
		}
		if err != nil {
			return nil, fmt.Errorf("alloc: %d bytes on stream %#x: %w", n, s, err)
		}
	}
	b = a.split(b, size)
	b.state = stateUsed
	b.requested = n
	a.stats.AllocatedBytes += b.size
	a.stats.RequestedBytes += n
	a.stats.PeakAllocatedBytes = max(a.stats.PeakAllocatedBytes, a.stats.AllocatedBytes)
	return b, nil
}

// take removes and returns the smallest free block of key's pool that
// holds size bytes, or nil.
func (a *Allocator) take(key poolKey, size int64) *Block {
	pool := a.pools[key]
	i, _ := slices.BinarySearchFunc(pool, size, func(b *Block, size int64) int { return cmp.Compare(b.size, size) })
	if i == len(pool) {
		return nil
	}
	b := pool[i]
	a.pools[key] = slices.Delete(pool, i, i+1)
	return b
}

func blockOrder(x, y *Block) int {
	if c := cmp.Compare(x.size, y.size); c != 0 {
		return c
	}
	return cmp.Compare(x.ptr, y.ptr)
}

func (a *Allocator) insert(b *Block) {
	key := poolKey{b.seg.stream, b.seg.small}
	pool := a.pools[key]
	i, _ := slices.BinarySearchFunc(pool, b, blockOrder)
	a.pools[key] = slices.Insert(pool, i, b)
}

func (a *Allocator) remove(b *Block) {
	key := poolKey{b.seg.stream, b.seg.small}
	pool := a.pools[key]
	i, found := slices.BinarySearchFunc(pool, b, blockOrder)
	if !found || pool[i] != b {
		panic(fmt.Sprintf("alloc: free block %#x (%d bytes) missing from its pool", b.ptr, b.size))
	}
	a.pools[key] = slices.Delete(pool, i, i+1)
}

// grow gets a new segment for key and returns its one free block (not in
// the pool).
func (a *Allocator) grow(key poolKey, size int64) (*Block, error) {
	n := segmentSize(size)
	p, err := a.mem.Alloc(n)
	if err != nil {
		return nil, err
	}
	a.stats.DeviceAllocs++
	a.stats.Segments++
	a.stats.ReservedBytes += n
	a.stats.PeakReservedBytes = max(a.stats.PeakReservedBytes, a.stats.ReservedBytes)
	seg := &segment{ptr: p, size: n, stream: key.stream, small: key.small}
	seg.head = &Block{ptr: p, size: n, stream: key.stream, seg: seg}
	a.segments[p] = seg
	return seg.head, nil
}

// split cuts b to size when the rest is worth keeping (any rest in a small
// segment, more than SmallMaxBytes in a large one), putting the rest in
// the pool.
func (a *Allocator) split(b *Block, size int64) *Block {
	rest := b.size - size
	if rest < MinBlockBytes || (!b.seg.small && rest <= SmallMaxBytes) {
		return b
	}
	r := &Block{ptr: b.ptr + Ptr(size), size: rest, stream: b.stream, seg: b.seg, prev: b, next: b.next}
	if b.next != nil {
		b.next.prev = r
	}
	b.next = r
	b.size = size
	a.insert(r)
	return b
}

// RecordStream marks b as used by work on stream s besides its own: when
// b is freed, it is not reused until s has passed the point of the Free
// (an event recorded then). Recording b's own stream, or a block that is
// not allocated, does nothing.
func (a *Allocator) RecordStream(b *Block, s Stream) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if b.ptr == 0 || b.state != stateUsed || s == b.stream || slices.Contains(b.uses, s) {
		return
	}
	b.uses = append(b.uses, s)
}

// Free returns b to its stream's pool: work enqueued later on that stream
// may reuse it at once (stream order makes this safe). A block used on
// other streams (RecordStream) waits for an event on each. Freeing a block
// twice is an error.
func (a *Allocator) Free(b *Block) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if b.state != stateUsed {
		return fmt.Errorf("alloc: free of block %#x (%d bytes) that is not allocated", b.ptr, b.requested)
	}
	a.stats.Frees++
	if b.ptr == 0 {
		b.state = stateFree
		return nil
	}
	a.stats.AllocatedBytes -= b.size
	a.stats.RequestedBytes -= b.requested
	if len(b.uses) == 0 {
		a.release(b)
		return nil
	}
	for _, s := range b.uses {
		e, err := a.mem.RecordEvent(s)
		if err != nil {
			// The block cannot be proven unused: keep it out of every pool
			// for good rather than risk a race (its segment stays reserved).
			for _, e := range b.events {
				a.mem.DestroyEvent(e)
			}
			b.events = nil
			b.state = statePending
			a.pending = append(a.pending, b)
			a.stats.PendingBytes += b.size
			return fmt.Errorf("alloc: free of block %#x: record event on stream %#x: %w", b.ptr, s, err)
		}
		b.events = append(b.events, e)
	}
	b.uses = nil
	b.state = statePending
	a.pending = append(a.pending, b)
	a.stats.PendingBytes += b.size
	return nil
}

// release merges b with free neighbours and puts it in its pool.
func (a *Allocator) release(b *Block) {
	b.state = stateFree
	b.requested = 0
	if p := b.prev; p != nil && p.state == stateFree {
		a.remove(p)
		p.absorbNext()
		b = p
	}
	if n := b.next; n != nil && n.state == stateFree {
		a.remove(n)
		b.absorbNext()
	}
	a.insert(b)
}

// absorbNext makes b's successor in its segment part of b: b grows by its
// size and takes its place in the list.
func (b *Block) absorbNext() {
	n := b.next
	b.size += n.size
	b.next = n.next
	if n.next != nil {
		n.next.prev = b
	}
}

// processEvents returns pending blocks whose events have completed to
// their pools; with wait, it first waits for every event.
func (a *Allocator) processEvents(wait bool) error {
	keep := a.pending[:0]
	var firstErr error
	for _, b := range a.pending {
		done := true
		for _, e := range b.events {
			var ok bool
			var err error
			if wait {
				err = a.mem.SyncEvent(e)
				ok = err == nil
			} else {
				ok, err = a.mem.EventDone(e)
			}
			if err != nil && firstErr == nil {
				firstErr = fmt.Errorf("alloc: event of freed block %#x: %w", b.ptr, err)
			}
			done = done && ok
		}
		if !done || len(b.events) == 0 { // no events: a failed RecordEvent, never reused
			keep = append(keep, b)
			continue
		}
		for _, e := range b.events {
			if err := a.mem.DestroyEvent(e); err != nil && firstErr == nil {
				firstErr = err
			}
		}
		b.events = nil
		a.stats.PendingBytes -= b.size
		a.release(b)
	}
	clear(a.pending[len(keep):])
	a.pending = keep
	return firstErr
}

// releaseCached returns every segment that is one free block to the device.
func (a *Allocator) releaseCached() error {
	var segs []*segment
	for _, seg := range a.segments {
		if b := seg.head; b.state == stateFree && b.next == nil {
			segs = append(segs, seg)
		}
	}
	slices.SortFunc(segs, func(x, y *segment) int { return cmp.Compare(x.ptr, y.ptr) })
	for _, seg := range segs {
		if err := a.mem.Free(seg.ptr); err != nil {
			return fmt.Errorf("alloc: free segment %#x (%d bytes): %w", seg.ptr, seg.size, err)
		}
		a.remove(seg.head)
		delete(a.segments, seg.ptr)
		a.stats.DeviceFrees++
		a.stats.Segments--
		a.stats.ReservedBytes -= seg.size
	}
	return nil
}

// EmptyCache waits for pending frees and returns every wholly free segment
// to the device, as torch.cuda.empty_cache: other processes (or a later,
// larger request) can then use the memory. Live blocks are untouched.
func (a *Allocator) EmptyCache() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if err := a.processEvents(true); err != nil {
		return err
	}
	return a.releaseCached()
}

// Stats returns a copy of the counters.
func (a *Allocator) Stats() Stats {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.stats
}

// ResetPeaks sets the peaks to the current values (as
// torch.cuda.reset_peak_memory_stats).
func (a *Allocator) ResetPeaks() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.stats.PeakAllocatedBytes = a.stats.AllocatedBytes
	a.stats.PeakReservedBytes = a.stats.ReservedBytes
}
