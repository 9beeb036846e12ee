package gemm

import "unsafe"

// unsafeSlice views n float32 starting at p. The driver guarantees that the
// range lies inside one of the caller's slices or a packing buffer.
func unsafeSlice(p *float32, n int) []float32 { return unsafe.Slice(p, n) }
