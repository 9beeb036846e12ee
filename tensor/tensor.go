package tensor

import (
	"fmt"
	"slices"
	"strings"
)

// Tensor is a dense float32 array: a view (shape, strides, offset) over a
// storage slice that several tensors may share. A Tensor created by FromSlice
// aliases the caller's slice, which is how flat gradient buckets hand out
// per-parameter views. A tensor on a device (see Device) views a device
// Buffer instead; its host accessors (Storage, Data, At, Set, Item,
// Values) panic, naming the device.
//
// Invariant: len(shape) == len(strides); every index reachable through the
// view lies inside storage (or buf); buf is nil exactly for host tensors,
// and then storage holds the elements.
//
// Tensors are not safe for concurrent mutation; concurrent reads are fine.
type Tensor struct {
	storage []float32
	offset  int
	shape   []int
	strides []int
	buf     Buffer // the device's memory; nil on the CPU
}

// New returns a contiguous zero tensor of the given shape. A tensor with no
// dimensions is a scalar holding one element.
func New(shape ...int) *Tensor {
	n := checkShape("New", shape)
	return &Tensor{storage: scratch(n), shape: cloneInts(shape), strides: contiguousStrides(shape)}
}

// FromSlice returns a contiguous tensor viewing data (no copy). It panics
// when len(data) differs from the product of shape.
func FromSlice(data []float32, shape ...int) *Tensor {
	n := checkShape("FromSlice", shape)
	if len(data) != n {
		panic(fmt.Sprintf("tensor: FromSlice: %d values for shape %v (want %d)", len(data), shape, n))
	}
	return &Tensor{storage: data, shape: cloneInts(shape), strides: contiguousStrides(shape)}
}

// Scalar returns a 0-dimensional tensor holding v.
func Scalar(v float32) *Tensor { return FromSlice([]float32{v}) }

// Shape returns the tensor's shape. The caller must not modify it.
func (t *Tensor) Shape() []int { return t.shape }

// Strides returns the strides in elements. The caller must not modify it.
func (t *Tensor) Strides() []int { return t.strides }

// Offset returns the view's first element's index into Storage.
func (t *Tensor) Offset() int { return t.offset }

// Storage returns the whole backing slice shared by all views of it.
func (t *Tensor) Storage() []float32 {
	if t.buf != nil {
		t.notHost("Storage")
	}
	return t.storage
}

// Dims returns the number of dimensions.
func (t *Tensor) Dims() int { return len(t.shape) }

// Dim returns the size of dimension i; negative i counts from the end.
func (t *Tensor) Dim(i int) int {
	if i < 0 {
		i += len(t.shape)
	}
	if i < 0 || i >= len(t.shape) {
		panic(fmt.Sprintf("tensor: Dim: dimension %d out of range for shape %v", i, t.shape))
	}
	return t.shape[i]
}

// Len returns the number of elements.
func (t *Tensor) Len() int {
	n := 1
	for _, s := range t.shape {
		n *= s
	}
	return n
}

// IsContiguous reports whether the view is row-major without gaps.
func (t *Tensor) IsContiguous() bool {
	want := 1
	for i := len(t.shape) - 1; i >= 0; i-- {
		if t.shape[i] != 1 && t.strides[i] != want {
			return false
		}
		want *= t.shape[i]
	}
	return true
}

// Data returns the elements of a contiguous tensor as a slice aliasing its
// storage (writes are visible through the tensor). It panics for a
// non-contiguous view; call Contiguous first.
func (t *Tensor) Data() []float32 {
	if t.buf != nil {
		t.notHost("Data")
	}
	if !t.IsContiguous() {
		panic(fmt.Sprintf("tensor: Data: non-contiguous view (shape %v, strides %v)", t.shape, t.strides))
	}
	return t.storage[t.offset : t.offset+t.Len()]
}

// SameShape reports whether t and u have equal shapes.
func (t *Tensor) SameShape(u *Tensor) bool { return slices.Equal(t.shape, u.shape) }

// String formats the shape and up to 8 leading values, for debugging.
func (t *Tensor) String() string {
	var b strings.Builder
	if t.buf != nil {
		fmt.Fprintf(&b, "tensor%v on %v", t.shape, t.Device())
		return b.String()
	}
	fmt.Fprintf(&b, "tensor%v[", t.shape)
	c := t
	if !t.IsContiguous() {
		c = t.Contiguous()
	}
	d := c.Data()
	for i, v := range d {
		if i == 8 {
			b.WriteString(" …")
			break
		}
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%g", v)
	}
	b.WriteByte(']')
	return b.String()
}

// Contiguous returns t itself when contiguous, else a contiguous copy.
func (t *Tensor) Contiguous() *Tensor {
	if t.IsContiguous() {
		return t
	}
	out := EmptyOn(t.Device(), t.shape...) // written whole by the copy
	out.CopyFrom(t)
	return out
}

func checkShape(op string, shape []int) int {
	n := 1
	for _, s := range shape {
		if s < 0 {
			panic(fmt.Sprintf("tensor: %s: negative dimension in shape %v", op, shape))
		}
		n *= s
	}
	return n
}

func contiguousStrides(shape []int) []int {
	st := make([]int, len(shape))
	acc := 1
	for i := len(shape) - 1; i >= 0; i-- {
		st[i] = acc
		acc *= shape[i]
	}
	return st
}

func cloneInts(a []int) []int { return append([]int(nil), a...) }
