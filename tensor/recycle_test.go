package tensor

import (
	"math"
	"runtime"
	"testing"
)

func TestRecycleReusesStorage(t *testing.T) {
	a := New(32, 32)
	p := &a.storage[0]
	Recycle(a)
	if a.storage != nil {
		t.Fatal("Recycle left the tensor its storage")
	}
	b := Empty(4, 256) // same element count, other shape
	if &b.storage[0] != p {
		t.Fatal("Empty did not reuse the recycled storage")
	}
	if got := b.Shape(); got[0] != 4 || got[1] != 256 || !b.IsContiguous() {
		t.Fatalf("Empty: shape %v contiguous %v", got, b.IsContiguous())
	}
	if c := Empty(32, 32); &c.storage[0] == p {
		t.Fatal("one recycled buffer served two tensors")
	}
}

func TestRecycleIgnoresViewsAndTiny(t *testing.T) {
	base := New(64, 64)
	for _, v := range []*Tensor{base.Narrow(0, 1, 32), base.T(), New(8, 8), base.Narrow(0, 0, 32)} {
		p := v.storage
		Recycle(v)
		if v.storage == nil {
			t.Fatalf("Recycle took the storage of a tensor of shape %v that does not own all of it (or is tiny)", v.Shape())
		}
		e := Empty(v.Shape()...)
		if len(p) > 0 && len(e.storage) > 0 && &e.storage[0] == &p[0] {
			t.Fatalf("Empty handed out storage of an ignored tensor of shape %v", v.Shape())
		}
	}
}

func TestEmptyPoison(t *testing.T) {
	old := poisonEmpty
	poisonEmpty = true
	defer func() { poisonEmpty = old }()
	Recycle(Full(1, 300))
	e := Empty(300)
	for i, v := range e.Data() {
		if !math.IsNaN(float64(v)) {
			t.Fatalf("element %d of a poisoned reused tensor is %v, want NaN", i, v)
		}
	}
	if z := Empty(3, 7); z.Data()[0] != 0 { // nothing to reuse: New's zeros
		t.Fatalf("fresh Empty: %v", z.Data()[0])
	}
}

func TestNewReusesRecycledStorageZeroed(t *testing.T) {
	a := Full(7, 40, 40)
	p := &a.storage[0]
	Recycle(a)
	b := New(1600)
	if &b.storage[0] != p {
		t.Fatal("New did not reuse the recycled storage")
	}
	for i, v := range b.Data() {
		if v != 0 {
			t.Fatalf("element %d of New on reused storage is %v, want 0", i, v)
		}
	}
}

// Live tensors never share storage: a buffer in the free list is handed
// out once, and one handed back twice is not (Recycle drops the tensor's
// reference).
func TestPoolNoAliasing(t *testing.T) {
	a := New(512)
	Recycle(a)
	Recycle(a) // storage already handed back: ignored
	seen := map[*float32]bool{}
	var live []*Tensor
	for range 4 {
		for _, x := range []*Tensor{New(512), Empty(512)} {
			p := &x.storage[0]
			if seen[p] {
				t.Fatal("two live tensors share storage")
			}
			seen[p] = true
			live = append(live, x)
		}
	}
	s := scratch(512)
	if seen[&s[0]] {
		t.Fatal("scratch handed out a live tensor's storage")
	}
	freeScratch(s)
	if x := New(512); &x.storage[0] != &s[0] {
		t.Fatal("New did not reuse the scratch handed back")
	}
	_ = live
}

// The free list keeps at most spareMaxPerSize buffers of one length.
func TestPoolBounded(t *testing.T) {
	const n = 1 << 10
	for range spareMaxPerSize + 10 {
		freeScratch(make([]float32, n))
	}
	spare.Lock()
	got := len(spare.free[n])
	spare.Unlock()
	if got > spareMaxPerSize {
		t.Fatalf("%d buffers of %d floats kept, want at most %d", got, n, spareMaxPerSize)
	}
	for range got { // leave the pool as other tests expect it
		takeSpare(n)
	}
}

// A convolution step (forward and backward, its results handed back as
// autograd does) reuses its scratch and results from the second step on:
// it allocates a small fraction of what the first one did.
func TestConvStepReusesStorage(t *testing.T) {
	x, w, b := Full(0.5, 8, 3, 16, 16), Full(0.1, 6, 3, 5, 5), Full(0.2, 6)
	step := func() {
		y, arg := Conv2dReLUMaxPool2d(x, w, b, 1, 2, 2)
		dy := Full(1, y.Shape()...)
		dx, dw, db := Conv2dReLUMaxPool2dBackward(dy, y, arg, x, w, 1, 2, 2, true)
		for _, t := range []*Tensor{y, dy, dx, dw, db} {
			Recycle(t)
		}
	}
	alloc := func() uint64 {
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.TotalAlloc
	}
	a0 := alloc()
	step()
	first := alloc() - a0
	a0 = alloc()
	const steps = 5
	for range steps {
		step()
	}
	later := (alloc() - a0) / steps
	// What stays: the pooling indices ([]int32) and small headers.
	if later*3 > first {
		t.Fatalf("a step allocates %d bytes after the first's %d: want under a third", later, first)
	}
}
