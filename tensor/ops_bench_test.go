package tensor

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// BenchmarkMatMul and BenchmarkAdd time the entry of a matrix product and
// of a binary elementwise op at a size where the kernel dominates and at
// one where the call's own overhead (shape checks, the device check,
// allocation) shows.
func BenchmarkMatMul(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{8, 256} {
		x, y := New(n, n), New(n, n)
		x.FillNormal(rng, 0, 1)
		y.FillNormal(rng, 0, 1)
		dst := New(n, n)
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			for b.Loop() {
				MatMulInto(dst, x, y)
			}
			b.ReportMetric(2*float64(n*n*n)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
}

func BenchmarkAdd(b *testing.B) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, n := range []int{64, 1 << 16} {
		x, y := New(n), New(n)
		x.FillNormal(rng, 0, 1)
		y.FillNormal(rng, 0, 1)
		dst := New(n)
		b.Run(fmt.Sprintf("into/n=%d", n), func(b *testing.B) {
			b.SetBytes(int64(12 * n))
			for b.Loop() {
				AddInto(dst, x, y)
			}
		})
		b.Run(fmt.Sprintf("scaled/n=%d", n), func(b *testing.B) {
			b.SetBytes(int64(12 * n))
			for b.Loop() {
				AddScaled(dst, 0.5, x)
			}
		})
	}
}
