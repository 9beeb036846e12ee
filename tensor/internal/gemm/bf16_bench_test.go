//go:build amd64

package gemm

import "testing"

// BenchmarkMicroKernel runs the 14×32 micro-kernels on L1-resident
// slivers (kc = 256 values of k): the float32 FMA kernel and the
// VDPBF16PS one, whose GFLOP/s ratio is the compute units' (2 on a core
// that issues VDPBF16PS at the FMA rate).
func BenchmarkMicroKernel(b *testing.B) {
	const kc, mr, nr = 256, 14, 32
	c := make([]float32, mr*nr)
	b.Run("dtype=fp32", func(b *testing.B) {
		if !hasAVX512() {
			b.Skip("no AVX-512")
		}
		a, bb := make([]float32, kc*mr), make([]float32, kc*nr)
		for b.Loop() {
			kernelAVX512x14x32(kc, &a[0], &bb[0], &c[0], nr, 1, 0, mr, bits(nr))
		}
		b.ReportMetric(2*kc*mr*nr*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
	})
	b.Run("dtype=bf16", func(b *testing.B) {
		if !hasAVX512BF16() {
			b.Skip("no AVX512-BF16")
		}
		a, bb := make([]uint32, kc/2*mr), make([]uint32, kc/2*nr)
		for b.Loop() {
			kernelBF16x14x32(kc/2, &a[0], &bb[0], &c[0], nr, 1, 0, mr, bits(nr))
		}
		b.ReportMetric(2*kc*mr*nr*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
	})
}
