package gemmtest

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/cohortml/cohort/tensor/internal/gemm"
)

// Func is an sgemm with the contract of gemm.Sgemm.
type Func func(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int)

// Case is one sgemm call to check.
type Case struct {
	TransA, TransB bool
	M, N, K        int
	Alpha, Beta    float32
	// PadA, PadB, PadC are added to the minimal leading dimensions.
	PadA, PadB, PadC int
}

func (c Case) String() string {
	t := func(b bool) string {
		if b {
			return "T"
		}
		return "N"
	}
	return fmt.Sprintf("%s%s/m=%d/n=%d/k=%d/alpha=%g/beta=%g/pad=%d,%d,%d",
		t(c.TransA), t(c.TransB), c.M, c.N, c.K, c.Alpha, c.Beta, c.PadA, c.PadB, c.PadC)
}

// sentinel fills padding: NaN in A and B (a read of it poisons the
// result), a recognisable value in C (a write to it is detected).
const cSentinel = float32(-12345.5)

// operands draws c's A and B, NaN in their padding, then C, cSentinel in
// its padding and NaN where beta is 0 (beta = 0 must overwrite C without
// reading it), with their leading dimensions.
func (c Case) operands(rng *rand.Rand) (a, b, cm []float32, lda, ldb, ldc int) {
	ar, ac := c.M, c.K
	if c.TransA {
		ar, ac = c.K, c.M
	}
	br, bc := c.K, c.N
	if c.TransB {
		br, bc = c.N, c.K
	}
	lda, ldb, ldc = ac+c.PadA, bc+c.PadB, c.N+c.PadC
	a = matrix(rng, ar, ac, lda, float32(math.NaN()))
	b = matrix(rng, br, bc, ldb, float32(math.NaN()))
	cm = matrix(rng, c.M, c.N, ldc, cSentinel)
	if c.Beta == 0 {
		for i := 0; i < c.M; i++ {
			for j := 0; j < c.N; j++ {
				cm[i*ldc+j] = float32(math.NaN())
			}
		}
	}
	return a, b, cm, lda, ldb, ldc
}

// Check runs one case through f and reports mismatches on t.
func Check(t testing.TB, f Func, c Case, rng *rand.Rand) {
	t.Helper()
	a, b, cm, lda, ldb, ldc := c.operands(rng)
	want := append([]float32(nil), cm...)
	gemm.Naive(c.TransA, c.TransB, c.M, c.N, c.K, c.Alpha, clean(a), lda, clean(b), ldb, c.Beta, want, ldc)
	// bound[i][j] = |alpha|·Σ|a||b| + |beta·c|: the scale of the rounding error.
	bound := make([]float32, len(cm))
	for i := range cm {
		if cm[i] == cm[i] { // not NaN
			bound[i] = float32(math.Abs(float64(cm[i])))
		}
	}
	gemm.Naive(c.TransA, c.TransB, c.M, c.N, c.K, abs(c.Alpha), absAll(clean(a)), lda, absAll(clean(b)), ldb, abs(c.Beta), bound, ldc)

	got := append([]float32(nil), cm...)
	f(c.TransA, c.TransB, c.M, c.N, c.K, c.Alpha, a, lda, b, ldb, c.Beta, got, ldc)

	eps := float64(c.K+4) * 2 * 0x1p-23
	bad := 0
	for i := 0; i < c.M; i++ {
		for j := 0; j < ldc && i*ldc+j < len(got); j++ {
			idx := i*ldc + j
			g, w := got[idx], want[idx]
			if j >= c.N {
				if g != cSentinel {
					t.Errorf("%v: C padding [%d][%d] written: %v", c, i, j, g)
					bad++
				}
				continue
			}
			tol := eps*float64(bound[idx]) + 1e-30
			if d := math.Abs(float64(g) - float64(w)); !(d <= tol) {
				t.Errorf("%v: C[%d][%d] = %v, want %v (|diff| %.3g > tol %.3g)", c, i, j, g, w, d, tol)
				bad++
			}
			if bad >= 5 {
				t.Errorf("%v: stopping after %d mismatches", c, bad)
				return
			}
		}
	}
}

// matrix returns a rows×cols matrix with leading dimension ld, values
// uniform in [-1, 1), padding set to pad.
func matrix(rng *rand.Rand, rows, cols, ld int, pad float32) []float32 {
	n := 0
	if rows > 0 {
		n = (rows-1)*ld + cols
	}
	s := make([]float32, n)
	for i := range s {
		if i%ld < cols {
			s[i] = 2*rng.Float32() - 1
		} else {
			s[i] = pad
		}
	}
	return s
}

// clean returns a copy of s with NaN padding replaced by zeros, for the
// reference (which reads only inside the matrix anyway).
func clean(s []float32) []float32 {
	out := make([]float32, len(s))
	for i, v := range s {
		if v == v {
			out[i] = v
		}
	}
	return out
}

func absAll(s []float32) []float32 {
	for i, v := range s {
		s[i] = abs(v)
	}
	return s
}

func abs(v float32) float32 { return float32(math.Abs(float64(v))) }

// Cases returns the fixed table: edge sizes around the micro-tiles of every
// kernel (4, 6, 14, 16, 32) and the cache blocks (k around 256, m around
// 144 and 336, n past 4096), every transpose combination, alpha and beta
// including 0, and padded leading dimensions.
func Cases() []Case {
	var cs []Case
	add := func(m, n, k int, alpha, beta float32, pad int) {
		for _, ta := range []bool{false, true} {
			for _, tb := range []bool{false, true} {
				cs = append(cs, Case{TransA: ta, TransB: tb, M: m, N: n, K: k, Alpha: alpha, Beta: beta, PadA: pad, PadB: 2 * pad, PadC: pad})
			}
		}
	}
	for _, m := range []int{0, 1, 2, 5, 6, 7, 13, 14, 15, 29} {
		for _, n := range []int{0, 1, 3, 8, 15, 16, 17, 31, 32, 33, 65} {
			add(m, n, 1+(m*7+n*3)%19, 1, 0, 0)
		}
	}
	for _, k := range []int{0, 1, 2, 3, 4, 5, 17, 255, 256, 257, 520} {
		add(19, 37, k, 1, 0.5, 3)
	}
	for _, ab := range [][2]float32{{1, 0}, {1, 1}, {-2, 0.25}, {0.5, -1}, {0, 0}, {0, 2}, {3, 0}} {
		add(23, 41, 30, ab[0], ab[1], 1)
	}
	add(145, 70, 40, 1, 1, 0)      // two A blocks of the AVX2 kernel
	add(350, 40, 300, 1, 0, 5)     // two A blocks of the AVX-512 kernel, two k slabs
	add(151, 128, 300, 1, 1, 0)    // AVX2 A read in place: two A blocks, two k slabs, a partial sliver
	add(256, 96, 20, 1, 0, 0)      // AVX2: lda 256 (transA) or 20, A packed or read in place
	add(250, 120, 260, 1, 0.5, 1)  // AVX-512 6×64 A read in place: two A blocks, three k slabs, a partial sliver
	add(3, 4200, 7, 1, 0, 0)       // two B panels
	add(64, 100, 784, 1, 0, 0)     // anchor-like, three k slabs
	add(200, 7, 300, 1.5, -0.5, 2) // few columns: computed as Cᵀ = op(B)ᵀ·op(A)ᵀ
	add(6, 25, 3001, 1, 0, 1)      // long k, A·Bᵀ: dot products (conv weight gradient)
	add(9, 13, 1100, -1, 0.5, 0)   // dot products, partial tiles both ways
	add(1, 1, 300, 1, 1, 3)        // one dot product
	add(9, 31, 4099, 1, 1, 3)      // dot products over two k slabs
	return cs
}

// Run checks f on Cases and on random shapes (a quick check: sizes 0–70,
// random transposes, alpha, beta, padding), each as a named subtest.
func Run(t *testing.T, f Func) {
	rng := rand.New(rand.NewPCG(1, 2))
	runCases(t, 300, rng, func(t *testing.T, c Case) { Check(t, f, c, rng) })
}

// runCases runs check on each of Cases, then on quick random cases drawn
// from rng (sizes 0–70, random transposes, alpha, beta, padding), each as
// a named subtest.
func runCases(t *testing.T, quick int, rng *rand.Rand, check func(t *testing.T, c Case)) {
	for _, c := range Cases() {
		t.Run(c.String(), func(t *testing.T) { check(t, c) })
	}
	vals := []float32{0, 1, -1, 0.5, 2.25}
	for i := 0; i < quick; i++ {
		c := Case{
			TransA: rng.IntN(2) == 0, TransB: rng.IntN(2) == 0,
			M: rng.IntN(71), N: rng.IntN(71), K: rng.IntN(71),
			Alpha: vals[rng.IntN(len(vals))], Beta: vals[rng.IntN(len(vals))],
			PadA: rng.IntN(3), PadB: rng.IntN(3), PadC: rng.IntN(3),
		}
		t.Run(fmt.Sprintf("quick%d/%v", i, c), func(t *testing.T) { check(t, c) })
	}
}
