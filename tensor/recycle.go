package tensor

import (
	"math"
	"os"
	"sync"
)

// Storage reuse: a training step allocates the same activation and
// gradient tensors every step. Fresh Go memory costs a page fault per page
// on first touch until the heap has grown to its goal, and New zeroes what
// is about to be overwritten anyway. Recycle hands back the storage of a
// tensor its owner knows to be dead (autograd does so for the gradients it
// consumed), and Empty reuses it for the next tensor of that size, without
// zeroing.
//
// Invariant: a slice is in the free list at most once, and nothing else
// references it while it is there (the caller of Recycle promises that).

const (
	spareMaxPerSize = 64       // buffers kept per element count
	spareMaxFloats  = 32 << 20 // floats kept in all (128 MiB)
)

var spare = freeList[float32]{free: map[int][][]float32{}, maxElems: spareMaxFloats}

// freeList holds storage handed back for reuse, by element count: at most
// spareMaxPerSize slices of one count and maxElems elements in all, none
// under 256 elements.
type freeList[T any] struct {
	sync.Mutex
	free     map[int][][]T
	elems    int
	maxElems int
}

// put adds s to the list, unless it is tiny or the list is full.
func (f *freeList[T]) put(s []T) {
	n := len(s)
	if n < 256 {
		return
	}
	f.Lock()
	defer f.Unlock()
	if len(f.free[n]) >= spareMaxPerSize || f.elems+n > f.maxElems {
		return
	}
	f.free[n] = append(f.free[n], s[:n:n])
	f.elems += n
}

// take removes and returns a slice of n elements from the list, or nil
// when it holds none.
func (f *freeList[T]) take(n int) []T {
	if n < 256 {
		return nil
	}
	f.Lock()
	defer f.Unlock()
	l := f.free[n]
	if len(l) == 0 {
		return nil
	}
	s := l[len(l)-1]
	l[len(l)-1] = nil
	f.free[n] = l[:len(l)-1]
	f.elems -= n
	return s[:n:n]
}

// poisonEmpty makes Empty fill reused storage with NaN, so that a reader
// of a tensor's unwritten elements (or a holder of storage that was
// recycled too early) sees it in tests. COHORT_POISON_EMPTY=1 turns it on.
var poisonEmpty = os.Getenv("COHORT_POISON_EMPTY") == "1"

// Empty returns a contiguous tensor of the given shape whose elements are
// unspecified: for a destination that is written whole before it is read
// (a GEMM with beta 0, a copy, an elementwise result). It reuses storage
// handed back by Recycle when there is some of the right size, and is
// New otherwise.
func Empty(shape ...int) *Tensor {
	n := checkShape("Empty", shape)
	if s := takeSpare(n); s != nil {
		if poisonEmpty {
			nan := float32(math.NaN())
			for i := range s {
				s[i] = nan
			}
		}
		return &Tensor{storage: s, shape: cloneInts(shape), strides: contiguousStrides(shape)}
	}
	return New(shape...)
}

// Recycle hands t's storage back for reuse by a later Empty. The caller
// promises that neither t nor any view of its storage is used again.
// Tensors that do not own their whole storage (views with an offset or
// gaps, or a part of their storage) and tiny ones are ignored. A device
// tensor that owns its whole buffer hands it to its backend's Release.
func Recycle(t *Tensor) {
	if t != nil && t.buf != nil {
		// A device tensor owning its whole buffer hands it to its backend.
		if t.offset == 0 && t.buf.Len() == t.Len() && t.Len() > 0 && t.IsContiguous() {
			b := t.buf
			t.buf = released{b.Device()} // a use after Recycle panics rather than reading reused memory
			backendOf("Recycle", b.Device()).Release(b)
		}
		return
	}
	if t == nil || t.offset != 0 || len(t.storage) != t.Len() || t.Len() < 256 || !t.IsContiguous() {
		return
	}
	s := t.storage
	t.storage = nil // a use after Recycle panics rather than reading reused data
	putSpare(s)
}

// putSpare adds s to the free list, unless it is tiny or the list is full.
func putSpare(s []float32) { spare.put(s) }

// scratch returns n zeroed floats for an op's temporary use (unfolded
// inputs, padded copies, packed weights): storage from the free list when
// it holds some of that length, fresh otherwise. The op hands it back with
// freeScratch once nothing reads it, so that the next step's call finds
// it: the same pages, already mapped, instead of new ones.
func scratch(n int) []float32 {
	if s := takeSpare(n); s != nil {
		clear(s)
		return s
	}
	return make([]float32, n)
}

// freeScratch hands back storage from scratch; nil is ignored.
func freeScratch(s ...[]float32) {
	for _, b := range s {
		if b != nil {
			putSpare(b)
		}
	}
}

func takeSpare(n int) []float32 { return spare.take(n) }

// released stands for a device buffer handed back by Recycle: a tensor
// holding it is still on its device, and any op on it reaches a backend
// that refuses the buffer.
type released struct{ dev Device }

func (r released) Device() Device { return r.dev }
func (released) DType() DType     { return Float32 }
func (released) Len() int         { return 0 }
