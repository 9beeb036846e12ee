package alloc_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/cohortml/cohort/device/alloc"
	"github.com/cohortml/cohort/device/fakedev"
)

// TestRandomAgainstModel drives the allocator with random requests, frees,
// cross-stream uses and partial stream progress over a fake device, and
// checks after every step what a naive model knows: live blocks are
// aligned and disjoint, the counters equal the model's sums, segments are
// tiled by their blocks with no two free neighbours, reserved bytes are
// what the device has handed out, no use ever finds its memory reused, and
// an out-of-memory error comes only after the cache was emptied.
func TestRandomAgainstModel(t *testing.T) {
	seeds, steps := uint64(6), 2000
	if testing.Short() {
		seeds, steps = 2, 1000
	}
	for seed := range seeds {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) { runRandom(t, seed, steps) })
	}
}

type live struct {
	b   *alloc.Block
	tag int
}

func runRandom(t *testing.T, seed uint64, steps int) {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	const capacity = 64 << 20
	dev := fakedev.New(capacity)
	a := alloc.New(dev)
	var blocks []live
	var waits []alloc.Event
	var allocs, frees, peak int64
	nextTag := 1
	size := func() int64 {
		switch rng.IntN(10) {
		case 0:
			return 0
		case 1, 2:
			return 1<<20 + rng.Int64N(12<<20) // large
		default:
			return 1 + rng.Int64N(1<<uint(rng.IntN(21))) // small, skewed to tiny
		}
	}
	for step := range steps {
		switch op := rng.IntN(10); {
		case op < 4: // alloc
			n, s := size(), alloc.Stream(rng.IntN(3))
			allocs++
			b, err := a.Alloc(n, s)
			if err != nil {
				if !errors.Is(err, alloc.ErrOutOfMemory) {
					t.Fatalf("step %d: Alloc(%d): %v", step, n, err)
				}
				checkOOM(t, step, a, dev, n)
				break
			}
			blocks = append(blocks, live{b, nextTag})
			if n > 0 {
				dev.Claim(s, b.Ptr(), n, nextTag)
				dev.Use(s, b.Ptr(), n, nextTag)
			}
			nextTag++
		case op < 7 && len(blocks) > 0: // free
			i := rng.IntN(len(blocks))
			if err := a.Free(blocks[i].b); err != nil {
				t.Fatalf("step %d: Free: %v", step, err)
			}
			frees++
			blocks[i] = blocks[len(blocks)-1]
			blocks = blocks[:len(blocks)-1]
		case op < 8 && len(blocks) > 0: // use on another stream, as a consumer
			l := blocks[rng.IntN(len(blocks))]
			if l.b.Size() == 0 {
				break
			}
			other := alloc.Stream((int(l.b.Stream()) + 1 + rng.IntN(2)) % 3)
			e, _ := dev.RecordEvent(l.b.Stream()) // the consumer waits for the producer
			waits = append(waits, e)
			if err := dev.Wait(other, e); err != nil {
				t.Fatal(err)
			}
			dev.Use(other, l.b.Ptr(), l.b.Size(), l.tag)
			a.RecordStream(l.b, other)
		case op < 9: // some progress on one stream
			s := alloc.Stream(rng.IntN(3))
			for range rng.IntN(4) {
				dev.Step(s)
			}
		default:
			if rng.IntN(20) == 0 {
				if err := a.EmptyCache(); err != nil {
					t.Fatal(err)
				}
			}
		}
		st := a.Stats()
		peak = max(peak, st.AllocatedBytes)
		check(t, step, a, dev, blocks)
		if st.Allocs != allocs || st.Frees != frees || st.PeakAllocatedBytes != peak {
			t.Fatalf("step %d: allocs %d frees %d peak %d, want %d %d %d", step, st.Allocs, st.Frees, st.PeakAllocatedBytes, allocs, frees, peak)
		}
		if v := dev.Violations(); len(v) > 0 {
			t.Fatalf("step %d: memory reused while in use: %v", step, v)
		}
	}
	for _, l := range blocks {
		if err := a.Free(l.b); err != nil {
			t.Fatal(err)
		}
	}
	dev.RunAll()
	if err := a.EmptyCache(); err != nil {
		t.Fatal(err)
	}
	for _, e := range waits {
		dev.DestroyEvent(e)
	}
	if st := a.Stats(); st.ReservedBytes != 0 || st.AllocatedBytes != 0 || st.PendingBytes != 0 || dev.Used() != 0 || dev.Events() != 0 {
		t.Fatalf("after freeing everything: %v; device used %d, events %d", st, dev.Used(), dev.Events())
	}
	if v := dev.Violations(); len(v) > 0 {
		t.Fatalf("memory reused while in use: %v", v)
	}
}

func check(t *testing.T, step int, a *alloc.Allocator, dev *fakedev.Device, blocks []live) {
	t.Helper()
	st := a.Stats()
	var requested int64
	used := map[alloc.Ptr]int64{} // live block → requested
	for _, l := range blocks {
		requested += l.b.Size()
		if l.b.Size() == 0 {
			if l.b.Ptr() != 0 {
				t.Fatalf("step %d: zero-byte block at %#x", step, l.b.Ptr())
			}
			continue
		}
		if l.b.Ptr()%alloc.MinBlockBytes != 0 {
			t.Fatalf("step %d: block %#x not aligned", step, l.b.Ptr())
		}
		if _, dup := used[l.b.Ptr()]; dup {
			t.Fatalf("step %d: two live blocks at %#x", step, l.b.Ptr())
		}
		used[l.b.Ptr()] = l.b.Size()
	}
	var allocated, reserved, pending int64
	for _, seg := range a.Snapshot() {
		reserved += seg.Bytes
		at := seg.Ptr
		prevFree := false
		for _, b := range seg.Blocks {
			if b.Ptr != at || b.Bytes <= 0 || b.Bytes%alloc.MinBlockBytes != 0 {
				t.Fatalf("step %d: segment %#x: block %#x (%d bytes) where %#x was expected", step, seg.Ptr, b.Ptr, b.Bytes, at)
			}
			at += alloc.Ptr(b.Bytes)
			switch b.State {
			case "used":
				req, ok := used[b.Ptr]
				if !ok || req != b.RequestedBytes || alloc.RoundSize(req) > b.Bytes {
					t.Fatalf("step %d: used block %#x (%d bytes, %d requested) is no live block (live: %v, %d)", step, b.Ptr, b.Bytes, b.RequestedBytes, ok, req)
				}
				delete(used, b.Ptr)
				allocated += b.Bytes
			case "pending":
				pending += b.Bytes
			case "free":
				if prevFree {
					t.Fatalf("step %d: segment %#x: free neighbours not merged at %#x", step, seg.Ptr, b.Ptr)
				}
			}
			prevFree = b.State == "free"
		}
		if at != seg.Ptr+alloc.Ptr(seg.Bytes) {
			t.Fatalf("step %d: segment %#x (%d bytes): blocks end at %#x", step, seg.Ptr, seg.Bytes, at)
		}
	}
	if len(used) != 0 {
		t.Fatalf("step %d: live blocks missing from the snapshot: %v", step, used)
	}
	if st.AllocatedBytes != allocated || st.RequestedBytes != requested || st.ReservedBytes != reserved || st.PendingBytes != pending {
		t.Fatalf("step %d: stats %v; model allocated %d requested %d reserved %d pending %d", step, st, allocated, requested, reserved, pending)
	}
	if st.ReservedBytes != dev.Used() || st.Segments != int64(dev.Allocations()) {
		t.Fatalf("step %d: reserved %d in %d segments, device has %d in %d", step, st.ReservedBytes, st.Segments, dev.Used(), dev.Allocations())
	}
	if st.PeakReservedBytes < st.ReservedBytes || st.PeakAllocatedBytes < st.AllocatedBytes {
		t.Fatalf("step %d: peaks below current: %v", step, st)
	}
}

// checkOOM: after an out-of-memory error the allocator holds no cache
// (no wholly free segment, nothing pending) and the device cannot hold a
// new segment for the request.
func checkOOM(t *testing.T, step int, a *alloc.Allocator, dev *fakedev.Device, n int64) {
	t.Helper()
	for _, seg := range a.Snapshot() {
		if len(seg.Blocks) == 1 && seg.Blocks[0].State == "free" {
			t.Fatalf("step %d: out of memory for %d bytes while segment %#x (%d bytes) is cached", step, n, seg.Ptr, seg.Bytes)
		}
	}
	if st := a.Stats(); st.PendingBytes != 0 {
		t.Fatalf("step %d: out of memory with %d bytes pending", step, st.PendingBytes)
	}
	seg := int64(alloc.SmallSegmentBytes)
	if r := alloc.RoundSize(n); r > alloc.SmallMaxBytes {
		seg = (r + alloc.LargeRoundBytes - 1) / alloc.LargeRoundBytes * alloc.LargeRoundBytes
	}
	if free, _, _ := dev.Info(); free >= seg {
		t.Fatalf("step %d: out of memory for %d bytes with %d free on the device", step, n, free)
	}
}
