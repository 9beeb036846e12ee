package gemmtest

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/cohortml/cohort/tensor/internal/gemm"
)

// FuncBF16 is a bfloat16 product with the contract of gemm.GemmBF16.
type FuncBF16 func(transA, transB bool, m, n, k int, alpha float32, a []uint16, lda int, b []uint16, ldb int, beta float32, c []float32, ldc int)

// CheckBF16 runs one case through f, on float32 values x, y uniform in
// [-1, 1) rounded to bfloat16 a, b (gemm.BF16), and checks each output
// against float64 references with the bounds of package gemm's
// gemm_bf16.go, u = 2⁻²⁴, γ_n = n·u/(1−n·u):
//
//   - against alpha·Σ a·b + beta·C (the exact result on the bfloat16
//     inputs): γ_{k+2}·(|alpha|·Σ|a||b| + |beta·C|);
//   - against alpha·Σ x·y + beta·C (the float32 inputs): that plus
//     (2⁻⁷ + 2⁻¹⁶)·|alpha|·Σ|x||y|.
//
// Both references are float64 sums of exact float64 products, whose own
// error (below k·2⁻⁵³ of the same sums) is allowed for. Padding of A and
// B holds NaN, padding of C a sentinel that must not change, and C holds
// NaN when beta is 0 (it must not be read).
func CheckBF16(t testing.TB, f FuncBF16, c Case, rng *rand.Rand) {
	t.Helper()
	x, y, cm, lda, ldb, ldc := c.operands(rng)
	a, b := bf16s(x), bf16s(y)
	got := append([]float32(nil), cm...)
	f(c.TransA, c.TransB, c.M, c.N, c.K, c.Alpha, a, lda, b, ldb, c.Beta, got, ldc)

	at := func(s []float32, ld int, trans bool, i, j int) float64 {
		if trans {
			return float64(s[j*ld+i])
		}
		return float64(s[i*ld+j])
	}
	wa, wb := widen(a), widen(b)
	const u = 0x1p-24
	gamma := func(n int) float64 { return float64(n) * u / (1 - float64(n)*u) }
	g, ref := gamma(c.K+2), float64(c.K)*0x1p-53
	bad := 0
	for i := 0; i < c.M; i++ {
		for j := 0; j < ldc && i*ldc+j < len(got); j++ {
			idx := i*ldc + j
			if j >= c.N {
				if got[idx] != cSentinel {
					t.Errorf("%v: C padding [%d][%d] written: %v", c, i, j, got[idx])
					bad++
				}
				continue
			}
			var sab, sxy, babs, xabs float64
			for p := 0; p < c.K; p++ {
				av, bv := at(wa, lda, c.TransA, i, p), at(wb, ldb, c.TransB, p, j)
				xv, yv := at(x, lda, c.TransA, i, p), at(y, ldb, c.TransB, p, j)
				sab += av * bv
				sxy += xv * yv
				babs += math.Abs(av * bv)
				xabs += math.Abs(xv * yv)
			}
			alpha := float64(c.Alpha)
			var cterm float64
			if c.Beta != 0 {
				cterm = float64(c.Beta) * float64(cm[idx])
			}
			scale := math.Abs(alpha)*babs + math.Abs(cterm)
			tight := g*scale + ref*math.Abs(alpha)*babs
			loose := tight + (0x1p-7+0x1p-16)*math.Abs(alpha)*xabs
			gv := float64(got[idx])
			if d := math.Abs(gv - (alpha*sab + cterm)); !(d <= tight) {
				t.Errorf("%v: C[%d][%d] = %v, want %v on the bf16 inputs (|diff| %.3g > bound %.3g)", c, i, j, gv, alpha*sab+cterm, d, tight)
				bad++
			}
			if d := math.Abs(gv - (alpha*sxy + cterm)); !(d <= loose) {
				t.Errorf("%v: C[%d][%d] = %v, want %v on the float32 inputs (|diff| %.3g > bound %.3g)", c, i, j, gv, alpha*sxy+cterm, d, loose)
				bad++
			}
			if bad >= 5 {
				t.Errorf("%v: stopping after %d mismatches", c, bad)
				return
			}
		}
	}
}

// RunBF16 checks f on Cases and on random shapes, as Run does.
func RunBF16(t *testing.T, f FuncBF16) {
	rng := rand.New(rand.NewPCG(3, 4))
	runCases(t, 200, rng, func(t *testing.T, c Case) { CheckBF16(t, f, c, rng) })
}

// bf16s rounds s to bfloat16; NaN padding stays NaN.
func bf16s(s []float32) []uint16 {
	out := make([]uint16, len(s))
	for i, v := range s {
		out[i] = gemm.BF16(v)
	}
	return out
}

func widen(s []uint16) []float32 {
	out := make([]float32, len(s))
	for i, h := range s {
		out[i] = gemm.F32(h)
	}
	return out
}
