package wrapcore

import (
	"testing"
	"unsafe"
)

func same(a, b []float32) bool { return unsafe.SliceData(a) == unsafe.SliceData(b) }

// TestBuffersReuse: a buffer handed back is reused (zeroed) only once its
// collective is done, the smallest fit first, and never beyond Limit.
func TestBuffersReuse(t *testing.T) {
	b := Buffers{Limit: 300}
	x := b.Get(100)
	if len(x) != 100 || uintptr(unsafe.Pointer(&x[0]))%64 != 0 {
		t.Fatalf("Get(100): %d floats at %p, want 100, 64-byte aligned", len(x), &x[0])
	}
	for i := range x {
		x[i] = 7
	}
	done := make(chan struct{})
	b.PutAfter(x, done)
	if got := b.HeldBytes(); got != 400 {
		t.Errorf("held %d bytes while the collective runs, want 400", got)
	}
	if y := b.Get(100); same(x, y) {
		t.Fatal("a buffer was reused before its collective was done")
	}
	close(done)
	y := b.Get(80)
	if !same(x, y) || len(y) != 80 {
		t.Fatalf("after the collective: Get(80) = new buffer of %d, want the kept one resliced to 80", len(y))
	}
	for i, v := range y {
		if v != 0 {
			t.Fatalf("reused buffer element %d = %v, want 0", i, v)
		}
	}
	// Smallest fit: of a 200- and a 100-float buffer, Get(90) takes the 100.
	big, small := b.Get(200), y
	b.PutAfter(big, nil)
	b.PutAfter(small, nil)
	if z := b.Get(90); !same(z, small) {
		t.Error("Get(90) did not take the smallest buffer that fits")
	}
	// Limit: 200 idle + 150 would exceed 300, so the 150 is dropped.
	c := Buffers{Limit: 300}
	p, q := c.Get(200), c.Get(150)
	c.PutAfter(p, nil)
	c.PutAfter(q[:1], nil) // handed back whole, whatever its length
	if got := c.HeldBytes(); got != 4*200 {
		t.Errorf("held %d bytes, want %d (the 150-float buffer is over Limit)", got, 4*200)
	}
}

// TestBuffersNoLimit: with Limit 0 nothing is kept.
func TestBuffersNoLimit(t *testing.T) {
	var b Buffers
	x := b.Get(64)
	b.PutAfter(x, nil)
	if y := b.Get(64); same(x, y) || b.HeldBytes() != 0 {
		t.Error("a Buffers with Limit 0 kept a buffer")
	}
}

// TestAccumulate: a reduction that went into a scratch buffer is added to
// its destination; one that wrote the destination itself is left alone.
func TestAccumulate(t *testing.T) {
	dst := []float32{1, 2, 3}
	Accumulate(dst, []float32{10, 20, 30})
	if dst[0] != 11 || dst[1] != 22 || dst[2] != 33 {
		t.Errorf("after Accumulate: %v, want [11 22 33]", dst)
	}
	Accumulate(dst, dst)
	if dst[0] != 11 {
		t.Errorf("Accumulate of a buffer onto itself changed it: %v", dst)
	}
}
