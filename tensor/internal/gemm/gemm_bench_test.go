package gemm_test

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/cohortml/cohort/tensor/gemmbench"
	. "github.com/cohortml/cohort/tensor/internal/gemm"
)

func BenchmarkSgemm(b *testing.B) {
	impls := map[string]Options{}
	for _, k := range Kernels() {
		impls[k] = Options{BLAS: BLASGo, Kernel: k}
	}
	impls["openblas"] = Options{BLAS: BLASOpenBLAS}
	for _, s := range gemmbench.Shapes() {
		for _, name := range []string{KernelAVX512, KernelAVX2, "avx2-packed", "openblas"} {
			// avx2-packed: the AVX2 kernel with every sliver of A packed
			// (no direct-A kernel), to compare with reading A in place.
			o, ok := impls[strings.TrimSuffix(name, "-packed")]
			if !ok {
				continue
			}
			for _, threads := range []int{1, 2} {
				o.Threads = threads
				b.Run(fmt.Sprintf("%s/%s/threads=%d", strings.ReplaceAll(s.Name, " ", "_"), name, threads), func(b *testing.B) {
					g, err := New(o)
					if err != nil {
						b.Skip(err)
					}
					if strings.HasSuffix(name, "-packed") {
						NoDirect(g)
					}
					rng := rand.New(rand.NewPCG(1, 1))
					x := randSlice(rng, s.M*s.K)
					y := randSlice(rng, s.K*s.N)
					z := make([]float32, s.M*s.N)
					lda, ldb := s.LDs()
					for b.Loop() {
						g.Sgemm(s.TransA, s.TransB, s.M, s.N, s.K, 1, x, lda, y, ldb, 0, z, s.N)
					}
					b.ReportMetric(2*float64(s.M)*float64(s.N)*float64(s.K)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
				})
			}
		}
	}
}

// BenchmarkGemmBF16 runs GemmBF16 on one thread on GPT-mini's qkv
// projection (2048×384, k = 128, x·Wᵀ) and a 1024³ product.
func BenchmarkGemmBF16(b *testing.B) {
	for _, s := range []gemmbench.Shape{
		{Name: "qkv-fwd-NT", TransB: true, M: 2048, N: 384, K: 128},
		{Name: "proj-dW-TN", TransA: true, M: 128, N: 128, K: 2048},
		{Name: "1024^3", M: 1024, N: 1024, K: 1024},
	} {
		b.Run(s.Name, func(b *testing.B) {
			g := MustNew(b, Options{BLAS: BLASGo, Threads: 1})
			a, bb, c := make([]uint16, s.M*s.K), make([]uint16, s.K*s.N), make([]float32, s.M*s.N)
			lda, ldb := s.LDs()
			for b.Loop() {
				g.GemmBF16(s.TransA, s.TransB, s.M, s.N, s.K, 1, a, lda, bb, ldb, 0, c, s.N)
			}
			b.ReportMetric(s.Flops()*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
}

func randSlice(rng *rand.Rand, n int) []float32 {
	s := make([]float32, n)
	for i := range s {
		s[i] = 2*rng.Float32() - 1
	}
	return s
}

// BenchmarkTriangular runs attention's four triangular products (GPT-mini:
// 32 sequences × 4 heads, T = 64, head width 32, q, k and v interleaved
// 384 floats apart) over all 128 heads per iteration, reading operands in
// place against packing them. Use -count to alternate the two.
func BenchmarkTriangular(b *testing.B) {
	const seqs, heads, T, hd, d = 32, 4, 64, 32, 128
	rng := rand.New(rand.NewPCG(1, 1))
	qkv := randSlice(rng, seqs*T*3*d)
	p := randSlice(rng, seqs*heads*T*T)
	out := make([]float32, seqs*T*3*d)
	for _, tc := range []struct {
		name          string
		transA, upper bool
	}{{"y=p·v", false, false}, {"dv=pᵀ·g", true, true}} {
		for _, variant := range []string{"inplace", "packed"} {
			b.Run(tc.name+"/"+variant, func(b *testing.B) {
				g, err := New(Options{BLAS: BLASGo, Threads: 1})
				if err != nil {
					b.Skip(err)
				}
				if variant == "packed" {
					PackTriangular(g)
				}
				for b.Loop() {
					for s := range seqs {
						for h := range heads {
							a := p[(s*heads+h)*T*T:][:T*T]
							g.SgemmTriangular(tc.transA, false, tc.upper, T, hd, 1, a, T, qkv[s*T*3*d+2*d+h*hd:], 3*d, 0, out[s*T*3*d+h*hd:], 3*d)
						}
					}
				}
				b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "µs/all-heads")
			})
		}
	}
}
