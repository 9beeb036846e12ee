package devicetest

import (
	"math"
	"testing"

	"github.com/cohortml/cohort/tensor"
)

// The suite's comparison must catch what it claims to: one ulp in bit
// mode, a relative error above the bound, a NaN in the wrong place.
func TestCompare(t *testing.T) {
	want := tensor.FromSlice([]float32{1, -2, 3, float32(math.NaN())}, 4)
	ulp := math.Nextafter32(1, 2)
	for _, c := range []struct {
		name string
		got  []float32
		tol  float64
		ok   bool
	}{
		{"equal-bits", []float32{1, -2, 3, float32(math.NaN())}, -1, true},
		{"one-ulp-bits", []float32{ulp, -2, 3, float32(math.NaN())}, -1, false},
		{"one-ulp-relative", []float32{ulp, -2, 3, float32(math.NaN())}, 1e-5, true},
		{"above-bound", []float32{1.001, -2, 3, float32(math.NaN())}, 1e-5, false},
		{"nan-moved", []float32{float32(math.NaN()), -2, 3, 4}, 1e-5, false},
		{"negative-zero-bits", []float32{1, -2, 3, float32(math.NaN())}, -1, true},
	} {
		err := compare(want, tensor.FromSlice(c.got, 4), c.tol)
		if (err == nil) != c.ok {
			t.Errorf("%s: compare = %v, want ok %v", c.name, err, c.ok)
		}
	}
	zero := tensor.New(2)
	if compare(zero, tensor.FromSlice([]float32{0, 1e-3}, 2), 1e-5) == nil {
		t.Errorf("a non-zero result accepted for a zero one")
	}
	if compare(zero, tensor.New(3), 1e-5) == nil {
		t.Errorf("a shape mismatch accepted")
	}
	if compare(tensor.FromSlice([]float32{0}, 1), tensor.FromSlice([]float32{float32(math.Copysign(0, -1))}, 1), -1) == nil {
		t.Errorf("−0 accepted for +0 in bit mode")
	}
}
