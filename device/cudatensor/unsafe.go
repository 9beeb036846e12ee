package cudatensor

import "unsafe"

// unsafePtr is the address of a slice's first element (len > 0).
func unsafePtr[T any](v []T) unsafe.Pointer { return unsafe.Pointer(&v[0]) }
