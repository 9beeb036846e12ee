package tensor

import (
	"math"
	"math/rand/v2"
	"testing"

	"cohort/tensor/internal/gemm"
)

// TestMathKernelsFollowGEMM checks that the pure-Go GEMM configuration
// (COHORT_GEMM_KERNEL=go) also selects the portable transcendental kernels.
func TestMathKernelsFollowGEMM(t *testing.T) {
	g, err := gemm.Default()
	if err != nil {
		t.Skipf("gemm configuration: %v", err)
	}
	if g.Kernel() == gemm.KernelGo && mathKernels().Asm() {
		t.Errorf("GEMM kernel %q but the math kernels run assembly", g.Kernel())
	}
	t.Logf("GEMM kernel %q, math kernels in assembly: %v", g.Kernel(), mathKernels().Asm())
}

func TestSoftmaxRows(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, tc := range []struct{ n, c int }{{1, 1}, {3, 7}, {4, 256}, {2, 33}} {
		x := New(tc.n, tc.c)
		x.FillNormal(rng, 0, 3)
		p := New(tc.n, tc.c)
		lse := SoftmaxRows(p, x)
		for i := 0; i < tc.n; i++ {
			var z float64
			row := x.Data()[i*tc.c : (i+1)*tc.c]
			for _, v := range row {
				z += math.Exp(float64(v))
			}
			if math.Abs(lse[i]-math.Log(z)) > 1e-5*(1+math.Abs(lse[i])) {
				t.Errorf("n=%d c=%d: lse[%d] = %g, want %g", tc.n, tc.c, i, lse[i], math.Log(z))
			}
			for j, v := range row {
				want := math.Exp(float64(v)) / z
				if got := float64(p.Data()[i*tc.c+j]); math.Abs(got-want) > 1e-6*(1+want) {
					t.Fatalf("n=%d c=%d: p[%d][%d] = %g, want %g", tc.n, tc.c, i, j, got, want)
				}
			}
		}
	}
}
