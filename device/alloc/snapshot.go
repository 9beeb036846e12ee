package alloc

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// OutOfMemoryError is a request the device could not satisfy even after
// the allocator returned its cache.
type OutOfMemoryError struct {
	RequestedBytes int64
	Stream         Stream
	AllocatedBytes int64 // held by live blocks
	ReservedBytes  int64 // held by the allocator (live blocks, pending frees and cache)
	FreeBytes      int64 // the device's free memory (-1 if unknown)
	TotalBytes     int64
	Err            error // the device's error
}

func (e *OutOfMemoryError) Error() string {
	dev := "device free/total unknown"
	if e.FreeBytes >= 0 {
		dev = fmt.Sprintf("the device has %s free of %s", Bytes(e.FreeBytes), Bytes(e.TotalBytes))
	}
	return fmt.Sprintf("alloc: out of device memory: tried to allocate %s on stream %#x; %s allocated, %s reserved by the allocator, %s; remedies: a smaller batch or microbatches, bf16 autocast, or EmptyCache to hand cached memory back to other users",
		Bytes(e.RequestedBytes), e.Stream, Bytes(e.AllocatedBytes), Bytes(e.ReservedBytes), dev)
}

// Unwrap gives ErrOutOfMemory and the device's error.
func (e *OutOfMemoryError) Unwrap() []error { return []error{ErrOutOfMemory, e.Err} }

func (a *Allocator) oomError(n int64, s Stream, err error) error {
	e := &OutOfMemoryError{RequestedBytes: n, Stream: s, AllocatedBytes: a.stats.AllocatedBytes, ReservedBytes: a.stats.ReservedBytes, FreeBytes: -1, Err: err}
	if free, total, err := a.mem.Info(); err == nil {
		e.FreeBytes, e.TotalBytes = free, total
	}
	return e
}

// Bytes formats a byte count the way PyTorch's messages do: "1.50 GiB",
// "512 B".
func Bytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.2f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.2f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

// SegmentInfo describes one segment, as torch.cuda.memory_snapshot.
type SegmentInfo struct {
	Ptr    Ptr
	Bytes  int64
	Stream Stream
	Small  bool
	Blocks []BlockInfo // by address
}

// BlockInfo describes one block of a segment.
type BlockInfo struct {
	Ptr            Ptr
	Bytes          int64
	RequestedBytes int64  // 0 unless used
	State          string // "used", "free" or "pending"
}

// Snapshot lists the segments by address with their blocks.
func (a *Allocator) Snapshot() []SegmentInfo {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []SegmentInfo
	for _, seg := range a.segments {
		si := SegmentInfo{Ptr: seg.ptr, Bytes: seg.size, Stream: seg.stream, Small: seg.small}
		for b := seg.head; b != nil; b = b.next {
			si.Blocks = append(si.Blocks, BlockInfo{Ptr: b.ptr, Bytes: b.size, RequestedBytes: b.requested, State: [...]string{"free", "used", "pending"}[b.state]})
		}
		out = append(out, si)
	}
	slices.SortFunc(out, func(x, y SegmentInfo) int { return cmp.Compare(x.Ptr, y.Ptr) })
	return out
}

// String formats the counters on one line.
func (s Stats) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "allocated %s (peak %s), reserved %s (peak %s), requested %s, pending %s; allocs %d, frees %d, segments %d, device allocs %d, device frees %d, cache flushes %d, ooms %d",
		Bytes(s.AllocatedBytes), Bytes(s.PeakAllocatedBytes), Bytes(s.ReservedBytes), Bytes(s.PeakReservedBytes),
		Bytes(s.RequestedBytes), Bytes(s.PendingBytes), s.Allocs, s.Frees, s.Segments, s.DeviceAllocs, s.DeviceFrees, s.CacheFlushes, s.OOMs)
	return b.String()
}
