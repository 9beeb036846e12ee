// Package tensortest holds the test helpers that the tests of the core
// packages (tensor, autograd) share: walking every index of a shape,
// checking that a call panics with the expected message, random inputs,
// and the relative difference of two sets of values.
package tensortest

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

// ForEachIndex calls f with every multi-index of shape in row-major
// order. f must not keep idx: it is updated in place.
func ForEachIndex(shape []int, f func(idx []int)) {
	n := 1
	for _, s := range shape {
		n *= s
	}
	idx := make([]int, len(shape))
	for k := 0; k < n; k++ {
		f(idx)
		for d := len(shape) - 1; d >= 0; d-- {
			idx[d]++
			if idx[d] < shape[d] {
				break
			}
			idx[d] = 0
		}
	}
}

// MustPanic runs f and checks that it panics with a message (the panic
// value as fmt.Sprint prints it) containing every fragment.
func MustPanic(t testing.TB, f func(), fragments ...string) {
	t.Helper()
	if !CheckPanic(t, "", f, fragments...) {
		t.Fatalf("no panic, want one mentioning %q", fragments)
	}
}

// CheckPanic runs f and reports whether it panicked. A panic message (the
// panic value as fmt.Sprint prints it) that lacks one of fragments is an
// error of t, which prefix begins.
func CheckPanic(t testing.TB, prefix string, f func(), fragments ...string) (panicked bool) {
	t.Helper()
	defer func() {
		t.Helper()
		r := recover()
		if r == nil {
			return
		}
		panicked = true
		msg := fmt.Sprint(r)
		for _, f := range fragments {
			if !strings.Contains(msg, f) {
				t.Errorf("%spanic %q does not mention %q", prefix, msg, f)
			}
		}
	}()
	f()
	return false
}

// Randn returns n draws of rng's standard normal, as float32.
func Randn(rng *rand.Rand, n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	return x
}

// L2Diff returns ‖got − want‖ and ‖want‖ (in float64).
func L2Diff(got, want []float32) (diff, norm float64) {
	for i := range want {
		d := float64(got[i]) - float64(want[i])
		diff += d * d
		norm += float64(want[i]) * float64(want[i])
	}
	return math.Sqrt(diff), math.Sqrt(norm)
}

// RelErr is ‖got − want‖ / ‖want‖ (+Inf where want is all zeros and got
// is not).
func RelErr(got, want []float32) float64 {
	diff, norm := L2Diff(got, want)
	if diff == 0 {
		return 0
	}
	return diff / norm
}
