package collective

import "golang.org/x/sys/cpu"

//go:noescape
func addF32AVX2(dst, a, b *float32, n int)

//go:noescape
func addF64AVX2(dst, a, b *float64, n int)

//go:noescape
func addI64AVX2(dst, a, b *int64, n int)

//go:noescape
func divF32AVX2(dst *float32, d float32, n int)

// hasAVX2 is read-only after package initialisation.
var hasAVX2 = cpu.X86.HasAVX2

// addVec sets dst = a + b with AVX2 when the CPU has it; it reports false
// (doing nothing) for other element types or CPUs.
func addVec[T number](dst, a, b []T) bool {
	n := len(dst)
	if !hasAVX2 || n == 0 || len(a) < n || len(b) < n {
		return n == 0
	}
	switch d := any(dst).(type) {
	case []float32:
		addF32AVX2(&d[0], &any(a).([]float32)[0], &any(b).([]float32)[0], n)
	case []float64:
		addF64AVX2(&d[0], &any(a).([]float64)[0], &any(b).([]float64)[0], n)
	case []int64:
		addI64AVX2(&d[0], &any(a).([]int64)[0], &any(b).([]int64)[0], n)
	default:
		return false
	}
	return true
}

// divF32Vec sets dst[i] /= d with AVX2 when the CPU has it; it reports
// false (doing nothing) otherwise.
func divF32Vec(dst []float32, d float32) bool {
	if !hasAVX2 || len(dst) == 0 {
		return len(dst) == 0
	}
	divF32AVX2(&dst[0], d, len(dst))
	return true
}
