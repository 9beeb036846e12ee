package tensor

import (
	"math"
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
