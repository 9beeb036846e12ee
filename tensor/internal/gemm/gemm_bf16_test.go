package gemm_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	. "github.com/cohortml/cohort/tensor/internal/gemm"
	"github.com/cohortml/cohort/tensor/internal/gemm/gemmtest"
)

// bf16Kernels returns the kernels whose GemmBF16 paths this CPU can run:
// each of Kernels (widening to float32) and avx512bf16 when present.
func bf16Kernels() []string {
	ks := Kernels()
	if HasAVX512BF16() {
		ks = append(ks, KernelAVX512BF16)
	}
	return ks
}

// TestGemmBF16 runs the bfloat16 conformance suite (gemmtest.RunBF16) on
// every path, with 1 and 2 threads, each product split whenever its
// partition allows.
func TestGemmBF16(t *testing.T) {
	for _, kern := range bf16Kernels() {
		for _, threads := range []int{1, 2} {
			t.Run(fmt.Sprintf("kernel=%s/threads=%d", kern, threads), func(t *testing.T) {
				g := MustNew(t, Options{BLAS: BLASGo, Kernel: kern, Threads: threads})
				want := "widen/" + kern
				if kern == KernelAVX512BF16 {
					want = kern
				}
				runBF16Split(t, g, want)
			})
		}
	}
}

// runBF16Split checks that g's bfloat16 path is want, then runs the
// bfloat16 conformance suite on it, each product split whenever its
// partition allows.
func runBF16Split(t *testing.T, g *Impl, want string) {
	t.Helper()
	if g.BF16Kernel() != want {
		t.Fatalf("BF16Kernel() = %q, want %q", g.BF16Kernel(), want)
	}
	AlwaysSplit(g)
	gemmtest.RunBF16(t, g.GemmBF16)
}

// TestGemmBF16Large checks products past every blocking size of the
// VDPBF16PS path (two B panels, several k slabs, several A blocks).
func TestGemmBF16Large(t *testing.T) {
	if testing.Short() {
		t.Skip("large products")
	}
	for _, kern := range bf16Kernels() {
		g := MustNew(t, Options{BLAS: BLASGo, Kernel: kern, Threads: 2})
		for _, c := range []gemmtest.Case{
			{M: 700, N: 130, K: 777, Alpha: 1, Beta: 0.5, PadA: 1},
			{TransA: true, TransB: true, M: 90, N: 4150, K: 9, Alpha: -1},
			{TransB: true, M: 64, N: 384, K: 128, Alpha: 1, Beta: 1},
		} {
			t.Run(fmt.Sprintf("kernel=%s/%v", kern, c), func(t *testing.T) {
				gemmtest.CheckBF16(t, g.GemmBF16, c, rand.New(rand.NewPCG(5, 6)))
			})
		}
	}
}

func TestGemmBF16Env(t *testing.T) {
	env := map[string]string{EnvKernel: "AVX512BF16"}
	o, err := OptionsFromEnv(func(k string) string { return env[k] })
	if err != nil || o.Kernel != KernelAVX512BF16 {
		t.Fatalf("OptionsFromEnv(%s=AVX512BF16) = %+v, %v", EnvKernel, o, err)
	}
	_, err = New(o)
	if HasAVX512BF16() != (err == nil) {
		t.Fatalf("New(avx512bf16) on a CPU with AVX512-BF16 %v: %v", HasAVX512BF16(), err)
	}
}

// TestGemmMixed runs the bfloat16 conformance suite on GemmMixed with
// each operand given as float32 values (the suite's bfloat16 inputs
// widened, which the packing rounds back to the same bits) or as bits, on
// every path with 2 threads (each product split where it can be); then
// checks its addends and epilogue against the separate passes they
// replace, bit for bit.
func TestGemmMixed(t *testing.T) {
	widen := func(h []uint16) []float32 {
		f := make([]float32, len(h))
		for i, v := range h {
			f[i] = F32(v)
		}
		return f
	}
	for _, kern := range bf16Kernels() {
		for _, threads := range []int{2} {
			g := MustNew(t, Options{BLAS: BLASGo, Kernel: kern, Threads: threads})
			AlwaysSplit(g)
			for _, f32 := range [][2]bool{{true, false}, {false, true}} {
				t.Run(fmt.Sprintf("kernel=%s/threads=%d/f32=%v", kern, threads, f32), func(t *testing.T) {
					gemmtest.RunBF16(t, func(transA, transB bool, m, n, k int, alpha float32, a []uint16, lda int, b []uint16, ldb int, beta float32, c []float32, ldc int) {
						ao, bo := BF16Operand(a), BF16Operand(b)
						if f32[0] {
							ao = F32Operand(widen(a))
						}
						if f32[1] {
							bo = F32Operand(widen(b))
						}
						g.GemmMixed(transA, transB, m, n, k, alpha, ao, lda, bo, ldb, beta, c, ldc, nil, nil)
					})
				})
			}
			t.Run(fmt.Sprintf("kernel=%s/threads=%d/fused", kern, threads), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(1, 2))
				m, n, k := 50, 70, 600
				a, b := make([]float32, m*k), make([]float32, n*k)
				for i := range a {
					a[i] = float32(rng.NormFloat64())
				}
				for i := range b {
					b[i] = float32(rng.NormFloat64())
				}
				row, mat := make([]float32, n), make([]float32, m*n)
				for i := range row {
					row[i] = float32(rng.NormFloat64())
				}
				for i := range mat {
					mat[i] = float32(rng.NormFloat64())
				}
				got, want := make([]float32, m*n), make([]float32, m*n)
				seen := make([]int, m*n)
				g.GemmMixed(false, true, m, n, k, 1, F32Operand(a), k, F32Operand(b), k, 0, got, n, &Addends{Row: row, Mat: mat, LdMat: n}, func(i0, i1, j0, j1 int) {
					for i := i0; i < i1; i++ {
						for j := j0; j < j1; j++ {
							seen[i*n+j]++
							got[i*n+j] *= 2
						}
					}
				})
				ha, hb := make([]uint16, len(a)), make([]uint16, len(b))
				g.ToBF16(ha, a)
				g.ToBF16(hb, b)
				g.GemmBF16(false, true, m, n, k, 1, ha, k, hb, k, 0, want, n)
				for i := range want {
					want[i] = ((want[i] + row[i%n]) + mat[i]) * 2
					if got[i] != want[i] || seen[i] != 1 {
						t.Fatalf("C[%d] = %v (epilogue ran %d times), want %v once", i, got[i], seen[i], want[i])
					}
				}
			})
		}
	}
}

// TestGemmBF16SplitTransposed: a transposed A with more rows of C than
// steps of k, split over threads (the row offset of the non-transposed
// layout lies past A's end).
func TestGemmBF16SplitTransposed(t *testing.T) {
	for _, kern := range bf16Kernels() {
		g := MustNew(t, Options{BLAS: BLASGo, Kernel: kern, Threads: 2})
		AlwaysSplit(g)
		c := gemmtest.Case{TransA: true, M: 1024, N: 784, K: 64, Alpha: 1}
		t.Run(fmt.Sprintf("kernel=%s/%v", kern, c), func(t *testing.T) {
			gemmtest.CheckBF16(t, g.GemmBF16, c, rand.New(rand.NewPCG(5, 6)))
		})
	}
}
