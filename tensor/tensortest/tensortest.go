// Package tensortest holds the test helpers that the tests of the core
// packages (tensor, autograd) share: walking every index of a shape, and
// checking that a call panics with the expected message.
package tensortest

import (
	"fmt"
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
	defer func() {
		t.Helper()
		r := recover()
		if r == nil {
			t.Fatalf("no panic, want one mentioning %q", fragments)
		}
		msg := fmt.Sprint(r)
		for _, f := range fragments {
			if !strings.Contains(msg, f) {
				t.Errorf("panic %q does not mention %q", msg, f)
			}
		}
	}()
	f()
}
