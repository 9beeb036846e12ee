package gemm_test

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"

	. "github.com/cohortml/cohort/tensor/internal/gemm"
	"github.com/cohortml/cohort/tensor/internal/gemm/gemmtest"
)

// kernels returns the cohort kernels this CPU can run.
func kernels() []string { return Kernels() }

// eachImpl runs f on every cohort kernel with 1, 2 and 3 threads, each
// product split over the threads whenever its partition allows.
func eachImpl(t *testing.T, f func(t *testing.T, g *Impl)) {
	for _, kern := range kernels() {
		for _, threads := range []int{1, 2, 3} {
			t.Run(fmt.Sprintf("kernel=%s/threads=%d", kern, threads), func(t *testing.T) {
				g := MustNew(t, Options{BLAS: BLASGo, Kernel: kern, Threads: threads})
				if g.Kernel() != kern || g.Backend() != BLASGo || g.Threads() != threads {
					t.Fatalf("New built %v, want kernel %s with %d threads", g, kern, threads)
				}
				AlwaysSplit(g)
				f(t, g)
			})
		}
	}
}

func TestConformance(t *testing.T) {
	eachImpl(t, func(t *testing.T, g *Impl) { gemmtest.Run(t, g.Sgemm) })
}

// TestEpilogue runs the conformance suite through SgemmEpilogue with an
// epilogue that negates what it is given: every element of C must be
// handed to it exactly once, inside C, and only once final (a block
// negated early would be accumulated into afterwards, and the result,
// negated back, would differ from the reference). It covers every path:
// blocked (split over threads or not), row-A, dot products and swapped.
func TestEpilogue(t *testing.T) {
	eachImpl(t, func(t *testing.T, g *Impl) {
		AnyRowA(g)
		gemmtest.Run(t, negatingEpilogue(t, g))
	})
}

// negatingEpilogue is g's SgemmEpilogue with an epilogue that negates each
// block it is given and checks that the blocks cover C exactly once, then
// negates C back: the sgemm contract holds only if each block was given
// once and final.
func negatingEpilogue(t *testing.T, g *Impl) gemmtest.Func {
	return func(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
		seen := make([]int32, m*n)
		g.SgemmEpilogue(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, func(i0, i1, j0, j1 int) {
			if i0 < 0 || i1 > m || j0 < 0 || j1 > n || i0 >= i1 || j0 >= j1 {
				t.Errorf("m=%d n=%d: epilogue on rows [%d, %d), columns [%d, %d)", m, n, i0, i1, j0, j1)
				return
			}
			for i := i0; i < i1; i++ {
				for j := j0; j < j1; j++ {
					seen[i*n+j]++
					c[i*ldc+j] = -c[i*ldc+j]
				}
			}
		})
		for i := range m {
			for j := range n {
				if seen[i*n+j] != 1 {
					t.Errorf("m=%d n=%d k=%d: C[%d][%d] given to the epilogue %d times, want 1", m, n, k, i, j, seen[i*n+j])
					return
				}
				c[i*ldc+j] = -c[i*ldc+j]
			}
		}
	}
}

// TestParallelLarge checks shapes big enough to split over threads in both
// directions.
func TestParallelLarge(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, kern := range kernels() {
		for _, threads := range []int{2, 4, 7} {
			g := MustNew(t, Options{BLAS: BLASGo, Kernel: kern, Threads: threads})
			AlwaysSplit(g)
			for _, c := range []gemmtest.Case{
				{M: 301, N: 97, K: 200, Alpha: 1, Beta: 0.5},
				{M: 40, N: 700, K: 150, Alpha: 1, TransB: true},
				{M: 150, N: 150, K: 150, Alpha: -1, Beta: 1, TransA: true, PadC: 3},
				{M: 600, N: 40, K: 64, Alpha: 1, TransA: true}, // row blocks start past row k of A
				{M: 30, N: 900, K: 50, Alpha: 1, TransA: true, TransB: true, PadB: 1},
				{M: 30, N: 40, K: 3000, Alpha: 1, Beta: 2, TransB: true, PadA: 1}, // dot products
				{M: 300, N: 9, K: 200, Alpha: 1, TransA: true},                    // computed transposed
			} {
				t.Run(fmt.Sprintf("kernel=%s/threads=%d/%v", kern, threads, c), func(t *testing.T) {
					gemmtest.Check(t, g.Sgemm, c, rng)
				})
			}
		}
	}
}

func TestConformanceOpenBLAS(t *testing.T) {
	for _, threads := range []int{1, 2} {
		t.Run(fmt.Sprintf("threads=%d", threads), func(t *testing.T) {
			g, err := New(Options{BLAS: BLASOpenBLAS, Threads: threads})
			if err != nil {
				t.Skipf("OpenBLAS not available, skipping: %v", err)
			}
			if g.Backend() != BLASOpenBLAS {
				t.Fatalf("New(openblas) built %v", g)
			}
			gemmtest.Run(t, g.Sgemm)
			t.Run("epilogue", func(t *testing.T) { gemmtest.Run(t, negatingEpilogue(t, g)) })
		})
	}
}

func TestOptionsFromEnv(t *testing.T) {
	for _, tc := range []struct {
		name    string
		env     map[string]string
		want    Options
		wantErr string
	}{
		{name: "empty", env: nil, want: Options{}},
		{name: "all set", env: map[string]string{EnvThreads: " 3 ", EnvBLAS: "OpenBLAS", EnvKernel: "avx2", EnvOpenBLASLib: "/opt/lib/libopenblas.so"},
			want: Options{Threads: 3, BLAS: BLASOpenBLAS, Kernel: KernelAVX2, OpenBLASLib: "/opt/lib/libopenblas.so"}},
		{name: "zero threads", env: map[string]string{EnvThreads: "0"}, wantErr: "COHORT_NUM_THREADS=\"0\""},
		{name: "junk threads", env: map[string]string{EnvThreads: "two"}, wantErr: "COHORT_NUM_THREADS=\"two\""},
		{name: "unknown blas", env: map[string]string{EnvBLAS: "mkl"}, wantErr: "COHORT_BLAS=\"mkl\""},
		{name: "unknown kernel", env: map[string]string{EnvKernel: "sse"}, wantErr: "COHORT_GEMM_KERNEL=\"sse\""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := OptionsFromEnv(func(k string) string { return tc.env[k] })
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.HasPrefix(err.Error(), "gemm: ") {
					t.Fatalf("OptionsFromEnv = %v, %v; want error mentioning %s", got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("OptionsFromEnv = %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

func TestNew(t *testing.T) {
	t.Run("zero value", func(t *testing.T) {
		g := MustNew(t, Options{})
		if want := min(runtime.NumCPU(), runtime.GOMAXPROCS(0)); g.Threads() != want {
			t.Errorf("threads = %d, want %d (CPUs available)", g.Threads(), want)
		}
		t.Logf("default: %v", g)
	})
	t.Run("explicit kernel wins over auto BLAS", func(t *testing.T) {
		g := MustNew(t, Options{Kernel: KernelGo})
		if g.Backend() != BLASGo || g.Kernel() != KernelGo {
			t.Errorf("built %v, want cohort go kernel", g)
		}
	})
	t.Run("openblas with a kernel contradicts", func(t *testing.T) {
		if _, err := New(Options{BLAS: BLASOpenBLAS, Kernel: KernelGo}); err == nil {
			t.Error("New accepted BLAS=openblas with Kernel=go")
		}
	})
	t.Run("missing library", func(t *testing.T) {
		_, err := New(Options{BLAS: BLASOpenBLAS, OpenBLASLib: "libcohort-no-such-library.so"})
		if err == nil || !strings.Contains(err.Error(), "libcohort-no-such-library.so") {
			t.Errorf("New with a missing library: %v, want an error naming it", err)
		}
		g, err := New(Options{OpenBLASLib: "libcohort-no-such-library.so", Kernel: KernelAuto})
		if err != nil || g.Backend() != BLASGo {
			t.Errorf("auto with a missing library: %v, %v; want cohort's kernel", g, err)
		}
	})
	t.Run("bad threads", func(t *testing.T) {
		if _, err := New(Options{Threads: -1}); err == nil {
			t.Error("New accepted Threads=-1")
		}
	})
}

func TestArgumentPanics(t *testing.T) {
	g := MustNew(t, Options{BLAS: BLASGo, Threads: 1})
	s := func(n int) []float32 { return make([]float32, n) }
	for _, tc := range []struct {
		name string
		call func()
		want string
	}{
		{"negative m", func() { g.Sgemm(false, false, -1, 2, 2, 1, s(4), 2, s(4), 2, 0, s(4), 2) }, "negative dimension"},
		{"short lda", func() { g.Sgemm(false, false, 2, 2, 3, 1, s(6), 2, s(6), 2, 0, s(4), 2) }, "lda=2 shorter than a row of A"},
		{"short ldb transposed", func() { g.Sgemm(false, true, 2, 2, 3, 1, s(6), 3, s(6), 2, 0, s(4), 2) }, "ldb=2 shorter than a row of B"},
		{"short a", func() { g.Sgemm(false, false, 2, 2, 3, 1, s(5), 3, s(6), 2, 0, s(4), 2) }, "len(a)=5 too short"},
		{"short c", func() { g.Sgemm(false, false, 2, 2, 3, 1, s(6), 3, s(6), 2, 0, s(3), 2) }, "len(c)=3 too short"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer func() {
				r := recover()
				msg, _ := r.(string)
				if !strings.HasPrefix(msg, "gemm: ") || !strings.Contains(msg, tc.want) {
					t.Errorf("panic %v, want a gemm: message containing %q", r, tc.want)
				}
			}()
			tc.call()
		})
	}
}

func TestSgemmAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector drops sync.Pool items at random")
	}
	for _, kern := range kernels() {
		t.Run("kernel="+kern, func(t *testing.T) {
			g := MustNew(t, Options{BLAS: BLASGo, Kernel: kern, Threads: 1})
			a, b, c := make([]float32, 100*100), make([]float32, 100*100), make([]float32, 100*100)
			g.Sgemm(false, true, 100, 100, 100, 1, a, 100, b, 100, 0, c, 100) // warm the buffer pool
			if n := testing.AllocsPerRun(50, func() {
				g.Sgemm(false, true, 100, 100, 100, 1, a, 100, b, 100, 0, c, 100)
			}); n > 0 {
				t.Errorf("Sgemm allocates %v times per call, want 0", n)
			}
		})
	}
}
