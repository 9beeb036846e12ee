package collective

import (
	"unsafe"
)

// reduceBytes sets dst = a ⊕ b element-wise for the dtype and op (Avg
// reduces as Sum). The three slices have the same length; dst may alias a
// or b exactly.
func reduceBytes(dt DType, op Op, dst, a, b []byte) {
	switch dt {
	case Float32:
		reduceNum(op, view[float32](dst), view[float32](a), view[float32](b))
	case Float64:
		reduceNum(op, view[float64](dst), view[float64](a), view[float64](b))
	case Int64:
		reduceNum(op, view[int64](dst), view[int64](a), view[int64](b))
	case BFloat16:
		reduceHalf(op, view[uint16](dst), view[uint16](a), view[uint16](b), BF16ToFloat32, BF16FromFloat32)
	case Float16:
		reduceHalf(op, view[uint16](dst), view[uint16](a), view[uint16](b), FP16ToFloat32, FP16FromFloat32)
	}
}

// scaleBytes divides dst by n (the final step of Avg).
func scaleBytes(dt DType, dst []byte, n int) {
	switch dt {
	case Float32:
		s := view[float32](dst)
		inv := float32(n)
		if divF32Vec(s, inv) {
			return
		}
		for i := range s {
			s[i] /= inv
		}
	case Float64:
		s := view[float64](dst)
		inv := float64(n)
		for i := range s {
			s[i] /= inv
		}
	case Int64:
		s := view[int64](dst)
		for i := range s {
			s[i] /= int64(n)
		}
	case BFloat16:
		s := view[uint16](dst)
		for i := range s {
			s[i] = BF16FromFloat32(BF16ToFloat32(s[i]) / float32(n))
		}
	case Float16:
		s := view[uint16](dst)
		for i := range s {
			s[i] = FP16FromFloat32(FP16ToFloat32(s[i]) / float32(n))
		}
	}
}

// view reinterprets a byte slice as elements of T. Buffers come from typed
// Go slices or from the executor's 8-byte-aligned scratch, so they are
// aligned for T.
func view[T any](p []byte) []T {
	if len(p) == 0 {
		return nil
	}
	var z T
	return unsafe.Slice((*T)(unsafe.Pointer(unsafe.SliceData(p))), len(p)/int(unsafe.Sizeof(z)))
}

type number interface{ ~float32 | ~float64 | ~int64 }

func reduceNum[T number](op Op, dst, a, b []T) {
	switch op {
	case Sum, Avg:
		sumInto(dst, a, b)
	case Prod:
		a, b = a[:len(dst)], b[:len(dst)]
		for i := range dst {
			dst[i] = a[i] * b[i]
		}
	case Max:
		a, b = a[:len(dst)], b[:len(dst)]
		for i := range dst {
			x, y := a[i], b[i]
			if y > x || y != y { // NaN propagates
				x = y
			}
			dst[i] = x
		}
	case Min:
		a, b = a[:len(dst)], b[:len(dst)]
		for i := range dst {
			x, y := a[i], b[i]
			if y < x || y != y {
				x = y
			}
			dst[i] = x
		}
	}
}

// sumInto is the hot loop of every all-reduce: vectorised where the CPU
// allows, else unrolled by eight.
func sumInto[T number](dst, a, b []T) {
	if addVec(dst, a, b) {
		return
	}
	sumScalar(dst, a, b)
}

func sumScalar[T number](dst, a, b []T) {
	n := len(dst)
	a, b = a[:n], b[:n]
	i := 0
	for ; i+8 <= n; i += 8 {
		d, x, y := dst[i:i+8:i+8], a[i:i+8:i+8], b[i:i+8:i+8]
		d[0] = x[0] + y[0]
		d[1] = x[1] + y[1]
		d[2] = x[2] + y[2]
		d[3] = x[3] + y[3]
		d[4] = x[4] + y[4]
		d[5] = x[5] + y[5]
		d[6] = x[6] + y[6]
		d[7] = x[7] + y[7]
	}
	for ; i < n; i++ {
		dst[i] = a[i] + b[i]
	}
}

// reduceHalf reduces 16-bit floats through float32, rounding each result
// to nearest even.
func reduceHalf(op Op, dst, a, b []uint16, load func(uint16) float32, store func(float32) uint16) {
	a, b = a[:len(dst)], b[:len(dst)]
	for i := range dst {
		x, y := load(a[i]), load(b[i])
		var z float32
		switch op {
		case Sum, Avg:
			z = x + y
		case Prod:
			z = x * y
		case Max:
			z = x
			if y > x || y != y {
				z = y
			}
		case Min:
			z = x
			if y < x || y != y {
				z = y
			}
		}
		dst[i] = store(z)
	}
}
