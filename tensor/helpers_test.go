package tensor

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/cohortml/cohort/tensor/tensortest"
)

func newRNG(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15)) }

func randT(rng *rand.Rand, shape ...int) *Tensor {
	t := New(shape...)
	t.FillNormal(rng, 0, 1)
	return t
}

// naiveValues reads every element through At, in row-major order.
func naiveValues(t *Tensor) []float32 {
	var out []float32
	tensortest.ForEachIndex(t.Shape(), func(idx []int) { out = append(out, t.At(idx...)) })
	return out
}

func assertClose(t *testing.T, what string, got, want []float32, tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: got %d values, want %d", what, len(got), len(want))
	}
	bad := 0
	for i := range got {
		g, w := float64(got[i]), float64(want[i])
		if math.Abs(g-w) > tol*(1+math.Abs(w)) || math.IsNaN(g) != math.IsNaN(w) {
			if bad < 5 {
				t.Errorf("%s[%d] = %g, want %g", what, i, g, w)
			}
			bad++
		}
	}
	if bad > 5 {
		t.Errorf("%s: %d of %d values differ", what, bad, len(got))
	}
}

// mustPanic runs f and checks that it panics with a message containing
// every fragment.
func mustPanic(t *testing.T, f func(), fragments ...string) {
	t.Helper()
	tensortest.MustPanic(t, f, fragments...)
}
