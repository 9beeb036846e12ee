package gemm_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	. "cohort/tensor/internal/gemm"
)

// benchShapes are the shapes of `cohort bench gemm`: square sizes and the
// anchor MLP's (batch 64, 784-1024-1024-10) forward and backward products.
var benchShapes = []struct {
	name           string
	transA, transB bool
	m, n, k        int
}{
	{"128^3", false, false, 128, 128, 128},
	{"512^3", false, false, 512, 512, 512},
	{"1024^3", false, false, 1024, 1024, 1024},
	{"64x784*784x1024", false, false, 64, 1024, 784},
	{"1024x1024*1024x64", false, false, 1024, 64, 1024},
	{"fc1.fwd_NT", false, true, 64, 1024, 784},
	{"fc2.dx_NN", false, false, 64, 1024, 1024},
	{"fc2.dW_TN", true, false, 1024, 1024, 64},
	{"fc1.dW_TN", true, false, 1024, 784, 64},
	{"fc3.fwd_NT", false, true, 64, 10, 1024},
}

func BenchmarkSgemm(b *testing.B) {
	impls := map[string]Options{}
	for _, k := range Kernels() {
		impls[k] = Options{BLAS: BLASGo, Kernel: k}
	}
	impls["openblas"] = Options{BLAS: BLASOpenBLAS}
	for _, s := range benchShapes {
		for _, name := range []string{KernelAVX512, KernelAVX2, "openblas"} {
			o, ok := impls[name]
			if !ok {
				continue
			}
			for _, threads := range []int{1, 2} {
				o.Threads = threads
				b.Run(fmt.Sprintf("%s/%s/threads=%d", s.name, name, threads), func(b *testing.B) {
					g, err := New(o)
					if err != nil {
						b.Skip(err)
					}
					rng := rand.New(rand.NewPCG(1, 1))
					x := randSlice(rng, s.m*s.k)
					y := randSlice(rng, s.k*s.n)
					z := make([]float32, s.m*s.n)
					lda, ldb := s.k, s.n
					if s.transA {
						lda = s.m
					}
					if s.transB {
						ldb = s.k
					}
					for b.Loop() {
						g.Sgemm(s.transA, s.transB, s.m, s.n, s.k, 1, x, lda, y, ldb, 0, z, s.n)
					}
					b.ReportMetric(2*float64(s.m)*float64(s.n)*float64(s.k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
				})
			}
		}
	}
}

func randSlice(rng *rand.Rand, n int) []float32 {
	s := make([]float32, n)
	for i := range s {
		s[i] = 2*rng.Float32() - 1
	}
	return s
}
