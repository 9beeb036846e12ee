package gemm

import (
	"fmt"
	"os"
	"sync"
)

// Sgemm computes C = alpha·op(A)·op(B) + beta·C for row-major matrices,
// where op(X) is X or Xᵀ as transA/transB say. op(A) is m×k, op(B) is k×n,
// C is m×n; lda, ldb, ldc are the row strides of A, B and C as stored.
// When beta is 0, C is overwritten (NaNs in C do not propagate). When alpha
// is 0 or k is 0, A and B are not read.
//
// Sgemm runs on the process-wide [Default] implementation, configured from
// the environment at the first call. It panics, with a message starting
// "gemm:", on negative dimensions, leading dimensions shorter than a row,
// slices too short for the matrices they hold, or an invalid environment.
// It is safe for concurrent use on disjoint C.
func Sgemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	g, err := Default()
	if err != nil {
		panic(err.Error())
	}
	g.Sgemm(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

// An Epilogue finishes a product in place: called as epi(i0, i1, j0, j1),
// it may read and rewrite C[i][j] for i0 ≤ i < i1 and j0 ≤ j < j1, which
// hold their final value alpha·op(A)·op(B) + beta·C when it is called.
type Epilogue func(i0, i1, j0, j1 int)

// SgemmEpilogue is [Sgemm] followed by epi over C: epi is called once for
// each rectangle of a partition of C, as soon as that rectangle holds its
// result, so that an elementwise pass over C (a bias, a residual, an
// activation) reads it while it is still in cache rather than from memory.
// Calls on different rectangles may run at once, on different goroutines.
// With a nil epi it is Sgemm.
func SgemmEpilogue(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int, epi Epilogue) {
	g, err := Default()
	if err != nil {
		panic(err.Error())
	}
	g.SgemmEpilogue(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, epi)
}

// SgemmFused is [SgemmEpilogue] with add's addends added to the product
// before epi sees it (add may be nil). It panics, as Sgemm does, on
// addends too short for C.
func SgemmFused(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int, add *Addends, epi Epilogue) {
	g, err := Default()
	if err != nil {
		panic(err.Error())
	}
	g.SgemmFused(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, add, epi)
}

// defaultImpl is built once, from the environment, on first use.
var defaultImpl = sync.OnceValues(func() (*Impl, error) {
	o, err := OptionsFromEnv(os.Getenv)
	if err != nil {
		return nil, err
	}
	return New(o)
})

// Default returns the implementation package-level [Sgemm] uses, built
// from [OptionsFromEnv](os.Getenv) at the first call of either; later
// changes to the environment have no effect. The error reports an invalid
// setting or a requested backend that cannot be loaded.
func Default() (*Impl, error) { return defaultImpl() }

// Naive is the reference implementation every fast path is checked
// against: the textbook triple loop with the contract of [Sgemm], each dot
// product accumulated in float64, minus the argument checks (out-of-range
// indexes panic with Go's bounds check).
func Naive(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	for i := 0; i < m; i++ {
		crow := c[i*ldc : i*ldc+n]
		if beta == 0 {
			clear(crow)
		} else if beta != 1 {
			for j := range crow {
				crow[j] *= beta
			}
		}
		if alpha == 0 {
			continue
		}
		for j := range crow {
			var s float64
			for p := 0; p < k; p++ {
				var av, bv float32
				if transA {
					av = a[p*lda+i]
				} else {
					av = a[i*lda+p]
				}
				if transB {
					bv = b[j*ldb+p]
				} else {
					bv = b[p*ldb+j]
				}
				s += float64(av) * float64(bv)
			}
			crow[j] += alpha * float32(s)
		}
	}
}

// checkArgs panics when the arguments do not describe matrices inside the
// given slices. The assembly kernels rely on it: they do not bounds-check.
func checkArgs[T float32 | uint16](transA, transB bool, m, n, k int, a []T, lda int, b []T, ldb int, c []float32, ldc int) {
	if m < 0 || n < 0 || k < 0 {
		panic(fmt.Sprintf("gemm: negative dimension m=%d n=%d k=%d", m, n, k))
	}
	ar, ac, br, bc := storedDims(transA, transB, m, n, k)
	checkMatrix("A", transA, a, ar, ac, lda, m, n, k)
	checkMatrix("B", transB, b, br, bc, ldb, m, n, k)
	checkMatrix("C", false, c, m, n, ldc, m, n, k)
}

// storedDims returns the stored rows and columns of A (ar×ac) and B
// (br×bc) of an m×n×k product with the given transposes.
func storedDims(transA, transB bool, m, n, k int) (ar, ac, br, bc int) {
	ar, ac, br, bc = m, k, k, n
	if transA {
		ar, ac = k, m
	}
	if transB {
		br, bc = n, k
	}
	return ar, ac, br, bc
}

func checkMatrix[T float32 | uint16](name string, trans bool, s []T, rows, cols, ld, m, n, k int) {
	if ld < cols || ld < 0 {
		panic(fmt.Sprintf("gemm: ld%s=%d shorter than a row of %s (%d×%d stored, trans=%v; m=%d n=%d k=%d)",
			lowerName(name), ld, name, rows, cols, trans, m, n, k))
	}
	if rows == 0 || cols == 0 {
		return
	}
	if need := (rows-1)*ld + cols; len(s) < need {
		panic(fmt.Sprintf("gemm: len(%s)=%d too short for a %d×%d matrix with ld%s=%d (need %d; m=%d n=%d k=%d)",
			lowerName(name), len(s), rows, cols, lowerName(name), ld, need, m, n, k))
	}
}

func lowerName(name string) string {
	switch name {
	case "A":
		return "a"
	case "B":
		return "b"
	}
	return "c"
}

// scaleC sets C = beta·C (C = 0 when beta is 0) on the m×n matrix c.
func scaleC(m, n int, beta float32, c []float32, ldc int) {
	if beta == 1 {
		return
	}
	for i := 0; i < m; i++ {
		row := c[i*ldc : i*ldc+n]
		if beta == 0 {
			clear(row)
			continue
		}
		for j := range row {
			row[j] *= beta
		}
	}
}
