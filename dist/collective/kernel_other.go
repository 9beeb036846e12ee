//go:build !amd64

package collective

// addVec has no vector version on this architecture.
func addVec[T number](dst, a, b []T) bool { return len(dst) == 0 }
