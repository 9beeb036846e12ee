package gemm_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	. "github.com/cohortml/cohort/tensor/internal/gemm"
	"github.com/cohortml/cohort/tensor/internal/gemm/gemmtest"
)

// TestRowAPath checks the transposed-output path for A·Bᵀ with at most 64
// rows of C (taken for any m here, AnyRowA) (a layer's forward product on a small batch): partial row
// tiles of B (n not a multiple of 6), several k slabs, both beta cases,
// padded leading dimensions and a split over threads, to gemmtest's
// rounding bound.
func TestRowAPath(t *testing.T) {
	if !slicesContains(Kernels(), KernelAVX512) {
		t.Skip("the row-A kernel needs AVX-512")
	}
	rng := rand.New(rand.NewPCG(5, 6))
	for _, threads := range []int{1, 2, 3} {
		g := MustNew(t, Options{BLAS: BLASGo, Kernel: KernelAVX512, Threads: threads})
		AlwaysSplit(g)
		AnyRowA(g)
		for _, c := range []gemmtest.Case{
			{M: 64, N: 1024, K: 784, Alpha: 1, TransB: true},
			{M: 64, N: 130, K: 300, Alpha: 1, Beta: 1, TransB: true, PadA: 3, PadB: 5, PadC: 7},
			{M: 1, N: 64, K: 64, Alpha: 2, TransB: true},
			{M: 17, N: 71, K: 129, Alpha: -1, Beta: 0.5, TransB: true, PadC: 1},
			{M: 48, N: 67, K: 256, Alpha: 1, Beta: 1, TransB: true, PadB: 2},
			{M: 60, N: 100, K: 65, Alpha: 0.5, TransB: true, PadA: 1},
		} {
			t.Run(fmt.Sprintf("threads=%d/%v", threads, c), func(t *testing.T) {
				gemmtest.Check(t, g.Sgemm, c, rng)
			})
		}
	}
}

func slicesContains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}
