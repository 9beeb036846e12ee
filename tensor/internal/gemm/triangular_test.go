package gemm_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	. "github.com/cohortml/cohort/tensor/internal/gemm"
)

// TestSgemmTriangular checks the triangular path against the naive
// product on every kernel: lower and upper, every transpose combination,
// sizes around the micro-tiles and past one slab of k (the fallback),
// padded leading dimensions, alpha and beta. Reading operands in place
// (where the kernel can) must give what packing them gives, bit for bit.
func TestSgemmTriangular(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	for _, kern := range kernels() {
		g := MustNew(t, Options{BLAS: BLASGo, Kernel: kern, Threads: 1})
		packed, err := New(Options{BLAS: BLASGo, Kernel: kern, Threads: 1})
		if err != nil {
			t.Fatal(err)
		}
		PackTriangular(packed)
		for _, m := range []int{1, 5, 6, 7, 14, 15, 31, 64, 300} {
			for _, n := range []int{1, 9, 32, 33, 64, 70} {
				for _, tc := range []struct {
					transA, transB, upper bool
					alpha, beta           float32
				}{
					{false, false, false, 1, 0}, {true, false, true, 1, 0}, {false, true, false, 0.5, 1},
					{true, true, true, -1, 0.5}, {false, false, true, 2, 0}, {true, false, false, 1, 1},
				} {
					name := fmt.Sprintf("%s/m=%d/n=%d/%+v", kern, m, n, tc)
					lda, ldb, ldc := m+1, n+2, n+3
					if tc.transB {
						ldb = m + 2
					}
					a := make([]float32, m*lda)
					for i := range m { // op(A)[i][p]
						for p := range m {
							if tc.upper && p < i || !tc.upper && p > i {
								continue
							}
							idx := i*lda + p
							if tc.transA {
								idx = p*lda + i
							}
							a[idx] = 2*rng.Float32() - 1
						}
					}
					brows := m
					if tc.transB {
						brows = n
					}
					b := make([]float32, brows*ldb)
					for i := range b {
						b[i] = 2*rng.Float32() - 1
					}
					c := make([]float32, m*ldc)
					for i := range c {
						c[i] = 2*rng.Float32() - 1
					}
					want := append([]float32(nil), c...)
					Naive(tc.transA, tc.transB, m, n, m, tc.alpha, a, lda, b, ldb, tc.beta, want, ldc)
					cp := append([]float32(nil), c...)
					packed.SgemmTriangular(tc.transA, tc.transB, tc.upper, m, n, tc.alpha, a, lda, b, ldb, tc.beta, cp, ldc)
					g.SgemmTriangular(tc.transA, tc.transB, tc.upper, m, n, tc.alpha, a, lda, b, ldb, tc.beta, c, ldc)
					for i := range c {
						if math.Float32bits(c[i]) != math.Float32bits(cp[i]) {
							t.Fatalf("%s: C[%d] = %v in place, %v packed", name, i, c[i], cp[i])
						}
					}
					tol := float64(m+4) * 4 * 0x1p-23 * float64(m+2)
					for i := range m {
						for j := range ldc {
							got, w := c[i*ldc+j], want[i*ldc+j]
							if j >= n {
								if got != w {
									t.Fatalf("%s: C padding [%d][%d] written", name, i, j)
								}
								continue
							}
							if d := math.Abs(float64(got - w)); !(d <= tol) {
								t.Fatalf("%s: C[%d][%d] = %v, want %v", name, i, j, got, w)
							}
						}
					}
				}
			}
		}
	}
}

// TestSgemmLowerNT checks the lower triangle of A·Bᵀ on every kernel
// against the full product from Sgemm, bit for bit, and against the naive
// product: sizes around the 6-row blocks and past 64 rows or one slab of
// k (the fallbacks), padded leading dimensions, several alphas. Columns
// past m (the padding of C's rows) must stay untouched.
func TestSgemmLowerNT(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	for _, kern := range kernels() {
		for _, narrow := range []bool{true, false} {
			g := MustNew(t, Options{BLAS: BLASGo, Kernel: kern, Threads: 1})
			if !narrow {
				FullWidthLower(g)
			}
			for _, m := range []int{1, 5, 6, 7, 13, 16, 17, 31, 32, 33, 48, 49, 63, 64, 65, 100} {
				for _, k := range []int{1, 7, 32, 33, 128, 129} {
					for _, alpha := range []float32{1, 0.125, -2} {
						name := fmt.Sprintf("%s/narrow=%v/m=%d/k=%d/alpha=%v", kern, narrow, m, k, alpha)
						lda, ldb, ldc := k+1, k+3, m+2
						a, b := make([]float32, m*lda), make([]float32, m*ldb)
						for i := range a {
							a[i] = 2*rng.Float32() - 1
						}
						for i := range b {
							b[i] = 2*rng.Float32() - 1
						}
						c := make([]float32, m*ldc)
						for i := range c {
							c[i] = float32(math.NaN())
						}
						full := append([]float32(nil), c...)
						naive := append([]float32(nil), c...)
						g.Sgemm(false, true, m, m, k, alpha, a, lda, b, ldb, 0, full, ldc)
						Naive(false, true, m, m, k, alpha, a, lda, b, ldb, 0, naive, ldc)
						g.SgemmLowerNT(m, k, alpha, a, lda, b, ldb, c, ldc)
						tol := float64(k+4) * 4 * 0x1p-23 * math.Abs(float64(alpha)) * float64(k)
						for i := range m {
							for j := range ldc {
								got := c[i*ldc+j]
								switch {
								case j >= m:
									if !math.IsNaN(float64(got)) {
										t.Fatalf("%s: C padding [%d][%d] written", name, i, j)
									}
								case j <= i:
									if math.Float32bits(got) != math.Float32bits(full[i*ldc+j]) {
										t.Fatalf("%s: C[%d][%d] = %v, Sgemm %v", name, i, j, got, full[i*ldc+j])
									}
									if d := math.Abs(float64(got - naive[i*ldc+j])); !(d <= tol) {
										t.Fatalf("%s: C[%d][%d] = %v, naive %v", name, i, j, got, naive[i*ldc+j])
									}
								}
							}
						}
					}
				}
			}
		}
	}
}
