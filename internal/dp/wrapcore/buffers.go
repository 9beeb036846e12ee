package wrapcore

import (
	"context"
	"unsafe"

	"github.com/cohortml/cohort/distributed"
)

// Buffers keeps the large float buffers of a step (full-gradient buckets,
// gathered parameters) for the next bucket or step that needs one, so that
// a steady-state step allocates none: fresh Go memory is zeroed by the
// allocator (or faulted in page by page, about 9 µs a page on the VMs
// measured) and every large allocation brings the next collection nearer.
// It plays the part of PyTorch's caching allocator for these buffers.
//
// A buffer handed back with PutAfter is reused only once its done channel
// is closed (the collective reading it has finished), and at most Limit
// floats are kept idle: a buffer that would exceed it is left to the
// garbage collector. A Limit of 0 keeps nothing (every Get allocates).
//
// Buffers is used from one goroutine (the wrapper's driver).
type Buffers struct {
	Limit int

	free    [][]float32 // idle, reusable now
	idle    int         // floats in free
	pending []pendingBuf
}

type pendingBuf struct {
	buf  []float32
	done <-chan struct{} // nil: reusable now
}

// Get returns a buffer of n floats, all zero, whose first element is
// 64-byte aligned: a kept one when one is large enough (the smallest such),
// else a new one.
func (b *Buffers) Get(n int) []float32 {
	f := b.GetDirty(n)
	clear(f)
	return f
}

// GetDirty is Get without the zeroing: a kept buffer holds what its last
// user left in it (a new one is zero).
func (b *Buffers) GetDirty(n int) []float32 {
	b.reclaim()
	best := -1
	for i, f := range b.free {
		if cap(f) >= n && (best < 0 || cap(f) < cap(b.free[best])) {
			best = i
		}
	}
	if best < 0 {
		return AlignedFloats(n)
	}
	f := b.free[best]
	b.free = append(b.free[:best], b.free[best+1:]...)
	b.idle -= cap(f)
	return f[:n]
}

// PutAfter hands buf back for reuse once done is closed (nil: at once).
// The caller promises not to touch buf again.
func (b *Buffers) PutAfter(buf []float32, done <-chan struct{}) {
	if cap(buf) == 0 || b.Limit <= 0 {
		return
	}
	b.pending = append(b.pending, pendingBuf{buf[:cap(buf)], done})
	b.reclaim()
}

// reclaim moves the pending buffers whose collective has finished to the
// free list, within Limit.
func (b *Buffers) reclaim() {
	keep := b.pending[:0]
	for _, p := range b.pending {
		if p.done != nil {
			select {
			case <-p.done:
			default:
				keep = append(keep, p)
				continue
			}
		}
		if b.idle+cap(p.buf) <= b.Limit {
			b.free = append(b.free, p.buf)
			b.idle += cap(p.buf)
		}
	}
	clear(b.pending[len(keep):])
	b.pending = keep
}

// ReduceScatter starts a sharded wrapper's reduce-scatter (average) of
// in, a bucket's full gradient of n elements taken from b (nil: none was
// taken, zeros), into dst, this rank's shard of it, and hands in back to
// b once the collective is done. It returns h with its Work set (nil in a
// group of one, which copies instead).
func (b *Buffers) ReduceScatter(ctx context.Context, pg distributed.ProcessGroup, h Reduction, dst, in []float32, n int) Reduction {
	if in == nil {
		in = b.Get(n)
	}
	if pg.Size() == 1 {
		copy(dst, in)
		b.PutAfter(in, nil)
	} else {
		h.Work = pg.ReduceScatter(ctx, distributed.F32(dst), distributed.F32(in), distributed.Avg)
		b.PutAfter(in, distributed.Completion(h.Work))
	}
	return h
}

// HeldBytes returns the bytes of the buffers kept for reuse (idle or
// waiting for their collective to finish).
func (b *Buffers) HeldBytes() int64 {
	n := b.idle
	for _, p := range b.pending {
		n += cap(p.buf)
	}
	return 4 * int64(n)
}

// AlignedFloats returns n zeroed floats whose first element is 64-byte
// aligned.
func AlignedFloats(n int) []float32 {
	const align = 16 // floats in 64 bytes
	buf := make([]float32, n+align)
	skip := 0
	if r := uintptr(unsafe.Pointer(unsafe.SliceData(buf))) % 64; r != 0 {
		skip = int(64-r) / 4
	}
	return buf[skip : skip+n : skip+n]
}

// Accumulate adds src into dst, a reduction's destination, when they
// differ: a reduction that could not write over dst (it already holds a
// gradient) went into src instead. src is left to the garbage collector
// rather than kept: this is the rare path (gradient accumulation without
// NoSync), and a small buffer kept would take the place of a bucket-sized
// one the next step needs.
func Accumulate(dst, src []float32) {
	if len(src) == 0 || unsafe.SliceData(src) == unsafe.SliceData(dst) {
		return
	}
	for i, v := range src[:len(dst)] {
		dst[i] += v
	}
}
