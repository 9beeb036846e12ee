package tensortest

import (
	"math"
	"testing"
)

func TestRelErr(t *testing.T) {
	for _, tc := range []struct {
		name      string
		got, want []float32
		rel       float64
	}{
		{"equal", []float32{1, -2}, []float32{1, -2}, 0},
		{"want zero", []float32{3, 4}, []float32{0, 0}, math.Inf(1)},
		{"both zero", []float32{0, 0}, []float32{0, 0}, 0},
		{"tenth", []float32{3.3, 4.4}, []float32{3, 4}, 0.1},
	} {
		if rel := RelErr(tc.got, tc.want); math.Abs(rel-tc.rel) > 1e-6 && rel != tc.rel {
			t.Errorf("%s: RelErr(%v, %v) = %v, want %v", tc.name, tc.got, tc.want, rel, tc.rel)
		}
	}
	if diff, norm := L2Diff([]float32{3, 4}, []float32{0, 0}); diff != 5 || norm != 0 {
		t.Errorf("L2Diff([3 4], [0 0]) = %v, %v; want 5, 0", diff, norm)
	}
}
