package tensor

import "fmt"

// This file holds the view operations: they return a new Tensor sharing
// t's storage (writes through one are visible through the other) and never
// copy elements, except Reshape of a non-contiguous tensor, which documents
// its copy.

func panicf(format string, args ...any) { panic("tensor: " + fmt.Sprintf(format, args...)) }

// normDim maps a possibly negative dimension onto [0, nd), panicking with op
// and shape when it is out of range.
func normDim(op string, d, nd int, shape []int) int {
	if d < 0 {
		d += nd
	}
	if d < 0 || d >= nd {
		panicf("%s: dimension %d out of range for shape %v", op, d, shape)
	}
	return d
}

func (t *Tensor) view(shape, strides []int, offset int) *Tensor {
	return &Tensor{storage: t.storage, offset: offset, shape: shape, strides: strides, buf: t.buf}
}

// inferShape resolves one -1 entry in shape so that it holds n elements.
func inferShape(op string, shape []int, n int, from []int) []int {
	out := cloneInts(shape)
	neg := -1
	prod := 1
	for i, s := range out {
		switch {
		case s == -1:
			if neg >= 0 {
				panicf("%s: more than one -1 in shape %v", op, shape)
			}
			neg = i
		case s < 0:
			panicf("%s: negative dimension in shape %v", op, shape)
		default:
			prod *= s
		}
	}
	if neg >= 0 {
		if prod == 0 || n%prod != 0 {
			panicf("%s: cannot infer -1 in shape %v for %d elements (from shape %v)", op, shape, n, from)
		}
		out[neg] = n / prod
		prod = n
	}
	if prod != n {
		panicf("%s: shape %v holds %d elements, tensor of shape %v holds %d", op, shape, prod, from, n)
	}
	return out
}

// Reshape returns a tensor with the given shape and the same elements in
// row-major order. One dimension may be -1 and is then inferred. When t is
// contiguous the result is a view sharing t's storage; otherwise it is a
// contiguous copy.
func (t *Tensor) Reshape(shape ...int) *Tensor {
	s := inferShape("Reshape", shape, t.Len(), t.shape)
	if !t.IsContiguous() {
		c := t.Contiguous()
		return c.view(s, contiguousStrides(s), c.offset)
	}
	return t.view(s, contiguousStrides(s), t.offset)
}

// Transpose returns a view with dimensions d0 and d1 swapped; negative
// dimensions count from the end.
func (t *Tensor) Transpose(d0, d1 int) *Tensor {
	nd := len(t.shape)
	d0 = normDim("Transpose", d0, nd, t.shape)
	d1 = normDim("Transpose", d1, nd, t.shape)
	sh, st := cloneInts(t.shape), cloneInts(t.strides)
	sh[d0], sh[d1] = sh[d1], sh[d0]
	st[d0], st[d1] = st[d1], st[d0]
	return t.view(sh, st, t.offset)
}

// T returns the transpose of a 2-D tensor as a view.
func (t *Tensor) T() *Tensor {
	if len(t.shape) != 2 {
		panicf("T: want a 2-D tensor, got shape %v", t.shape)
	}
	return t.Transpose(0, 1)
}

// Permute returns a view whose dimension i is t's dimension dims[i]; dims
// must be a permutation of 0..Dims()-1 (negative entries count from the end).
func (t *Tensor) Permute(dims ...int) *Tensor {
	nd := len(t.shape)
	if len(dims) != nd {
		panicf("Permute: %d dims %v for shape %v", len(dims), dims, t.shape)
	}
	seen := make([]bool, nd)
	sh, st := make([]int, nd), make([]int, nd)
	for i, d := range dims {
		d = normDim("Permute", d, nd, t.shape)
		if seen[d] {
			panicf("Permute: dims %v repeat dimension %d (shape %v)", dims, d, t.shape)
		}
		seen[d] = true
		sh[i], st[i] = t.shape[d], t.strides[d]
	}
	return t.view(sh, st, t.offset)
}

// Narrow returns the view of length elements of dimension dim starting at
// start.
func (t *Tensor) Narrow(dim, start, length int) *Tensor {
	dim = normDim("Narrow", dim, len(t.shape), t.shape)
	if start < 0 || length < 0 || start+length > t.shape[dim] {
		panicf("Narrow: [%d, %d) out of range for dimension %d of shape %v", start, start+length, dim, t.shape)
	}
	sh := cloneInts(t.shape)
	sh[dim] = length
	off := t.offset
	if length > 0 {
		off += start * t.strides[dim]
	}
	return t.view(sh, cloneInts(t.strides), off)
}

// Slice returns the view of indices [start, end) of dimension dim.
func (t *Tensor) Slice(dim, start, end int) *Tensor {
	if end < start {
		panicf("Slice: end %d before start %d (dimension %d of shape %v)", end, start, dim, t.shape)
	}
	return t.Narrow(dim, start, end-start)
}

// Select returns the view at index i of dimension dim, with that dimension
// removed.
func (t *Tensor) Select(dim, i int) *Tensor {
	dim = normDim("Select", dim, len(t.shape), t.shape)
	if i < 0 || i >= t.shape[dim] {
		panicf("Select: index %d out of range for dimension %d of shape %v", i, dim, t.shape)
	}
	sh := append(cloneInts(t.shape[:dim]), t.shape[dim+1:]...)
	st := append(cloneInts(t.strides[:dim]), t.strides[dim+1:]...)
	return t.view(sh, st, t.offset+i*t.strides[dim])
}

// Unsqueeze returns a view with a new dimension of size 1 at position dim
// (0 ≤ dim ≤ Dims(); negative counts from the end of the result).
func (t *Tensor) Unsqueeze(dim int) *Tensor {
	dim = normDim("Unsqueeze", dim, len(t.shape)+1, t.shape)
	st := 1
	if dim < len(t.shape) {
		st = t.strides[dim] * t.shape[dim]
	}
	sh := append(append(cloneInts(t.shape[:dim]), 1), t.shape[dim:]...)
	sts := append(append(cloneInts(t.strides[:dim]), st), t.strides[dim:]...)
	return t.view(sh, sts, t.offset)
}

// Squeeze returns a view without dimension dim, which must have size 1.
func (t *Tensor) Squeeze(dim int) *Tensor {
	dim = normDim("Squeeze", dim, len(t.shape), t.shape)
	if t.shape[dim] != 1 {
		panicf("Squeeze: dimension %d of shape %v is not 1", dim, t.shape)
	}
	sh := append(cloneInts(t.shape[:dim]), t.shape[dim+1:]...)
	st := append(cloneInts(t.strides[:dim]), t.strides[dim+1:]...)
	return t.view(sh, st, t.offset)
}

// Expand returns a broadcast view of t with the given shape: dimensions of
// size 1 (and missing leading dimensions) repeat with stride 0. The result
// must not be written to.
func (t *Tensor) Expand(shape ...int) *Tensor {
	st, ok := broadcastStrides(t.shape, t.strides, shape)
	if !ok {
		panicf("Expand: shape %v does not broadcast to %v", t.shape, shape)
	}
	return t.view(cloneInts(shape), st, t.offset)
}

// broadcastStrides returns the strides that read a tensor of shape from
// (strides st) as the larger shape to (0 on broadcast dimensions), and
// whether from broadcasts to to.
func broadcastStrides(from, st, to []int) ([]int, bool) {
	if len(from) > len(to) {
		return nil, false
	}
	out := make([]int, len(to))
	lead := len(to) - len(from)
	for i := range from {
		switch {
		case from[i] == to[lead+i]:
			out[lead+i] = st[i]
		case from[i] == 1:
			out[lead+i] = 0
		default:
			return nil, false
		}
	}
	return out, true
}

// BroadcastShapes returns the shape that a and b broadcast to under
// NumPy/PyTorch rules, and false when they are incompatible.
func BroadcastShapes(a, b []int) ([]int, bool) {
	n := max(len(a), len(b))
	out := make([]int, n)
	for i := 0; i < n; i++ {
		da, db := 1, 1
		if j := len(a) - n + i; j >= 0 {
			da = a[j]
		}
		if j := len(b) - n + i; j >= 0 {
			db = b[j]
		}
		switch {
		case da == db, db == 1:
			out[i] = da
		case da == 1:
			out[i] = db
		default:
			return nil, false
		}
	}
	return out, true
}

// Clone returns a contiguous copy of t that shares nothing with it.
func (t *Tensor) Clone() *Tensor {
	out := EmptyOn(t.Device(), t.shape...) // written whole by the copy
	out.CopyFrom(t)
	return out
}

// CopyFrom copies src's elements into t's view. src must have t's shape or
// broadcast to it. Overlap between src and t is not allowed unless they are
// the same view.
func (t *Tensor) CopyFrom(src *Tensor) {
	binaryInto("CopyFrom", opCopy, t, t, src)
}

// Fill sets every element of t's view to v.
func (t *Tensor) Fill(v float32) {
	if t.buf != nil {
		_, be := deviceOf("Fill", t)
		be.Fill(t, v)
		return
	}
	if t.IsContiguous() {
		d := t.Data()
		if v == 0 {
			clear(d)
			return
		}
		for i := range d {
			d[i] = v
		}
		return
	}
	l := newLoop(t.shape, t.strides)
	l.rows(t.offset, 0, 0, func(o, _, _, n, s, _, _ int) {
		for i := 0; i < n; i++ {
			t.storage[o+i*s] = v
		}
	})
}

// Zero sets every element of t's view to 0, in place (views of t see it).
func (t *Tensor) Zero() { t.Fill(0) }

// index returns the storage position of a full index.
func (t *Tensor) index(op string, idx []int) int {
	if t.buf != nil {
		t.notHost(op)
	}
	if len(idx) != len(t.shape) {
		panicf("%s: %d indices %v for shape %v", op, len(idx), idx, t.shape)
	}
	p := t.offset
	for i, x := range idx {
		if x < 0 || x >= t.shape[i] {
			panicf("%s: index %v out of range for shape %v", op, idx, t.shape)
		}
		p += x * t.strides[i]
	}
	return p
}

// At returns the element at the given index (one entry per dimension).
func (t *Tensor) At(idx ...int) float32 { return t.storage[t.index("At", idx)] }

// Set stores v at the given index (one entry per dimension).
func (t *Tensor) Set(v float32, idx ...int) { t.storage[t.index("Set", idx)] = v }

// Item returns the only element of a one-element tensor.
func (t *Tensor) Item() float32 {
	if t.Len() != 1 {
		panicf("Item: tensor of shape %v has %d elements, want 1", t.shape, t.Len())
	}
	if t.buf != nil {
		t.notHost("Item")
	}
	return t.storage[t.offset]
}

// Full returns a contiguous tensor of the given shape filled with v.
func Full(v float32, shape ...int) *Tensor {
	t := New(shape...)
	t.Fill(v)
	return t
}

// Values returns a contiguous copy of t's elements in row-major order.
func (t *Tensor) Values() []float32 {
	if t.buf != nil {
		t.notHost("Values")
	}
	return append([]float32(nil), t.Contiguous().Data()...)
}
