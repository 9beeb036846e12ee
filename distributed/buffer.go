package distributed

import (
	"fmt"
	"unsafe"

	"github.com/cohortml/cohort/distributed/collective"
	"github.com/cohortml/cohort/tensor"
)

// DType names a Buffer's element type. It is the collectives' own type,
// so the two packages share one set of values and names.
type DType = collective.DType

const (
	Float32  = collective.Float32
	Float64  = collective.Float64
	Int64    = collective.Int64
	BFloat16 = collective.BFloat16 // raw uint16 payloads
	Float16  = collective.Float16  // raw uint16 payloads
)

// Buffer is a typed view of contiguous memory that a collective reads and
// writes in place. Build one with F32, F64, I64 or FromTensor.
type Buffer struct {
	DType DType
	f32   []float32
	f64   []float64
	i64   []int64
	u16   []uint16
}

// F32 wraps a float32 slice (aliased, not copied).
func F32(s []float32) Buffer { return Buffer{DType: Float32, f32: s} }

// F64 wraps a float64 slice.
func F64(s []float64) Buffer { return Buffer{DType: Float64, f64: s} }

// I64 wraps an int64 slice.
func I64(s []int64) Buffer { return Buffer{DType: Int64, i64: s} }

// BF16 wraps raw bfloat16 values; FP16 raw float16 values.
func BF16(s []uint16) Buffer { return Buffer{DType: BFloat16, u16: s} }
func FP16(s []uint16) Buffer { return Buffer{DType: Float16, u16: s} }

// FromTensor wraps a contiguous tensor's elements (panics if it is not
// contiguous; see tensor.Tensor.Data).
func FromTensor(t *tensor.Tensor) Buffer { return F32(t.Data()) }

// Len returns the number of elements.
func (b Buffer) Len() int {
	switch b.DType {
	case Float32:
		return len(b.f32)
	case Float64:
		return len(b.f64)
	case Int64:
		return len(b.i64)
	default:
		return len(b.u16)
	}
}

// Slice returns the elements [lo, hi) of b, sharing its memory.
func (b Buffer) Slice(lo, hi int) Buffer {
	switch b.DType {
	case Float32:
		b.f32 = b.f32[lo:hi]
	case Float64:
		b.f64 = b.f64[lo:hi]
	case Int64:
		b.i64 = b.i64[lo:hi]
	default:
		b.u16 = b.u16[lo:hi]
	}
	return b
}

// Float32s, Float64s, Int64s and Uint16s return the underlying slice (nil
// for another dtype).
func (b Buffer) Float32s() []float32 { return b.f32 }
func (b Buffer) Float64s() []float64 { return b.f64 }
func (b Buffer) Int64s() []int64     { return b.i64 }
func (b Buffer) Uint16s() []uint16   { return b.u16 }

// Bytes views b's elements as raw bytes, in the machine's byte order (no
// copy; nil when b is empty), for backends that move them.
func (b Buffer) Bytes() []byte {
	var p unsafe.Pointer
	var n int
	switch b.DType {
	case Float32:
		p, n = unsafe.Pointer(unsafe.SliceData(b.f32)), 4*len(b.f32)
	case Float64:
		p, n = unsafe.Pointer(unsafe.SliceData(b.f64)), 8*len(b.f64)
	case Int64:
		p, n = unsafe.Pointer(unsafe.SliceData(b.i64)), 8*len(b.i64)
	default:
		p, n = unsafe.Pointer(unsafe.SliceData(b.u16)), 2*len(b.u16)
	}
	if n == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(p), n)
}

// AllGatherInPlace reports whether an all-gather's in is exactly rank's
// own chunk of out (an in-place gather), and returns an error when the two
// overlap otherwise, as ProcessGroup.AllGather requires: for backends.
func AllGatherInPlace(out, in Buffer, rank int) (bool, error) {
	o, i := out.Bytes(), in.Bytes()
	if len(o) == 0 || len(i) == 0 {
		return false, nil
	}
	ob, ib := uintptr(unsafe.Pointer(&o[0])), uintptr(unsafe.Pointer(&i[0]))
	if ib+uintptr(len(i)) <= ob || ob+uintptr(len(o)) <= ib {
		return false, nil
	}
	if ib == ob+uintptr(rank*len(i)) {
		return true, nil
	}
	return false, fmt.Errorf("distributed: allgather: the input overlaps the output but is not this rank's chunk of it (rank %d, elements %d to %d)",
		rank, rank*in.Len(), (rank+1)*in.Len())
}
