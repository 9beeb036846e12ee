//go:build !amd64

package collective

// addVec has no vector version on this architecture.
func addVec[T number](dst, a, b []T) bool { return len(dst) == 0 }

// divF32Vec has no vector version on this architecture.
func divF32Vec(dst []float32, d float32) bool { return len(dst) == 0 }
