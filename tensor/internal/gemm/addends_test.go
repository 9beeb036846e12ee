package gemm_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sync/atomic"
	"testing"

	. "github.com/cohortml/cohort/tensor/internal/gemm"
)

// TestAddends: SgemmFused gives, bit for bit, Sgemm's product with the row
// addend and then the matrix addend added in separate passes, on every
// path: the AVX-512 6×64 kernel adding them in place (full slivers of A
// read in place, the last of several k slabs only), a partial sliver or a
// transposed A (after the kernel), products too wide to read A in place
// or on other kernels (block by block), and the row-A, dot, swapped,
// k = 0 and alpha = 0 paths (after the product); split over threads or
// not, with beta 0 or not, partial column tiles, padded strides, and
// either addend alone.
func TestAddends(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	type shape struct {
		m, n, k        int
		transA, transB bool
		alpha, beta    float32
	}
	shapes := []shape{
		{100, 384, 128, false, true, 1, 0}, // a linear layer: in place, one slab
		{250, 128, 300, false, true, 1, 0}, // three k slabs, two row blocks
		{37, 200, 300, false, false, 1, 0}, // a partial sliver; masked columns
		{61, 64, 7, false, true, -0.5, 0.75},
		{50, 700, 40, false, false, 1, 0}, // wider than A is read in place for
		{90, 100, 60, true, false, 1, 0},  // transposed A
		{40, 20, 30, false, true, 1, 1},   // few columns
		{5, 300, 64, false, true, 1, 0},   // few rows: row-A or dot
		{3, 4, 5000, false, true, 1, 0.5}, // dot products
		{30, 50, 0, false, false, 1, 0.5}, // k = 0
		{30, 50, 20, false, false, 0, 1},  // alpha = 0
	}
	eachImpl(t, func(t *testing.T, g *Impl) {
		for _, rowA := range []bool{false, true} {
			if rowA {
				AnyRowA(g)
			}
			for si, s := range shapes {
				if rowA && (s.m > 64 || !s.transB || s.transA) {
					continue // the row-A path takes only these
				}
				for _, which := range []string{"both", "row", "mat"} {
					if which != "both" && si > 0 {
						break // either addend alone: on the in-place kernel
					}
					name := fmt.Sprintf("rowA=%v/%+v/%s", rowA, s, which)
					lda, ldb, ldc, ldm := s.k+1, s.n+2, s.n+3, s.n+1
					if s.transA {
						lda = s.m + 1
					}
					if s.transB {
						ldb = s.k + 2
					}
					a := randSlice(rng, max(s.m, s.k)*lda)
					b := randSlice(rng, max(s.n, s.k)*ldb)
					c0 := randSlice(rng, s.m*ldc)
					add := &Addends{LdMat: ldm}
					if which != "mat" {
						add.Row = randSlice(rng, s.n)
					}
					if which != "row" {
						add.Mat = randSlice(rng, s.m*ldm)
					}
					want := append([]float32(nil), c0...)
					g.Sgemm(s.transA, s.transB, s.m, s.n, s.k, s.alpha, a, lda, b, ldb, s.beta, want, ldc)
					for i := range s.m {
						for j := range s.n {
							if add.Row != nil {
								want[i*ldc+j] += add.Row[j]
							}
							if add.Mat != nil {
								want[i*ldc+j] += add.Mat[i*ldm+j]
							}
						}
					}
					got := append([]float32(nil), c0...)
					var seen atomic.Int64 // the epilogue runs on the threads
					g.SgemmFused(s.transA, s.transB, s.m, s.n, s.k, s.alpha, a, lda, b, ldb, s.beta, got, ldc, add, func(i0, i1, j0, j1 int) {
						seen.Add(int64((i1 - i0) * (j1 - j0)))
					})
					if seen.Load() != int64(s.m*s.n) {
						t.Fatalf("%s: the epilogue saw %d elements, want %d", name, seen.Load(), s.m*s.n)
					}
					for i := range got {
						if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
							t.Fatalf("%s: C[%d][%d] = %v, want %v", name, i/ldc, i%ldc, got[i], want[i])
						}
					}
				}
			}
		}
	})
}

// TestAddendsPanics: addends too short for C are refused.
func TestAddendsPanics(t *testing.T) {
	g := MustNew(t, Options{BLAS: BLASGo, Threads: 1})
	a, b, c := make([]float32, 12), make([]float32, 12), make([]float32, 9)
	for _, add := range []*Addends{
		{Row: make([]float32, 2)},
		{Mat: make([]float32, 9), LdMat: 2},
		{Mat: make([]float32, 8), LdMat: 3},
	} {
		func() {
			defer func() {
				if r := recover(); r == nil {
					t.Errorf("%+v: no panic for a 3×3 C", add)
				}
			}()
			g.SgemmFused(false, false, 3, 3, 4, 1, a, 4, b, 3, 0, c, 3, add, nil)
		}()
	}
}
