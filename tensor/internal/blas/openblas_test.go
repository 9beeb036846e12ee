package blas_test

import (
	"errors"
	"testing"

	"github.com/cohortml/cohort/tensor/internal/blas"
	"github.com/cohortml/cohort/tensor/internal/gemm/gemmtest"
)

// load returns OpenBLAS or skips the test, saying why.
func load(t *testing.T) *blas.OpenBLAS {
	t.Helper()
	l, err := blas.Load("libopenblas.so.0")
	if err != nil {
		t.Skipf("OpenBLAS not available, skipping: %v", err)
	}
	return l
}

func TestLoadMissing(t *testing.T) {
	_, err := blas.Load("libcohort-no-such-library.so.0")
	if !errors.Is(err, blas.ErrUnavailable) {
		t.Fatalf("Load(missing) = %v, want an error wrapping ErrUnavailable", err)
	}
}

func TestThreads(t *testing.T) {
	l := load(t)
	for _, n := range []int{1, 2, 1} {
		l.SetThreads(n)
		if got := l.Threads(); got != n {
			t.Fatalf("after SetThreads(%d), Threads() = %d", n, got)
		}
	}
}

func TestConformance(t *testing.T) {
	l := load(t)
	t.Logf("OpenBLAS: %s", l.Config())
	l.SetThreads(1)
	// gemm handles m, n or k = 0 and alpha = 0 before calling the library;
	// so does this wrapper.
	gemmtest.Run(t, func(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
		if m == 0 || n == 0 {
			return
		}
		if k == 0 || alpha == 0 {
			for i := 0; i < m; i++ {
				for j := 0; j < n; j++ {
					if beta == 0 {
						c[i*ldc+j] = 0
					} else {
						c[i*ldc+j] *= beta
					}
				}
			}
			return
		}
		l.Sgemm(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
	})
}

func TestSgemmAllocs(t *testing.T) {
	l := load(t)
	l.SetThreads(1)
	a := make([]float32, 64*64)
	b := make([]float32, 64*64)
	c := make([]float32, 64*64)
	allocs := testing.AllocsPerRun(100, func() {
		l.Sgemm(false, true, 64, 64, 64, 1, a, 64, b, 64, 0, c, 64)
	})
	if allocs > 0 {
		t.Errorf("Sgemm allocates %v times per call, want 0", allocs)
	}
}
