package gemm

import (
	"testing"
	"unsafe"
)

// AlwaysSplit makes g split every product its partition splits, even a
// small one that finds no helper polling, so that tests reach the
// parallel path whatever the timing.
func AlwaysSplit(g *Impl) { g.coldMin = 0 }

// NoRowA turns off the transposed-output path (rowa.go), so that tests and
// benchmarks can compare it with the blocked path.
func NoRowA(g *Impl) { g.rowA = nil }

// AnyRowA makes g take the row-A path for every A·Bᵀ with at most 64 rows
// of C, so that tests reach it with partial column tiles.
func AnyRowA(g *Impl) { g.anyRowA = true }

// FullWidthLower makes g's SgemmLowerNT compute every block of rows on
// the full-width row-A kernel.
func FullWidthLower(g *Impl) { g.narrowLower = false }

// PackTriangular makes g's SgemmTriangular pack every operand.
func PackTriangular(g *Impl) { g.triangularInPlace = false }

// NoDirect makes g pack every sliver of A (no direct-A kernel), so that
// tests and benchmarks can compare the two.
func NoDirect(g *Impl) {
	for _, p := range []**arch{&g.arch, &g.wide} {
		if *p != nil {
			ar := **p
			ar.directA = nil
			*p = &ar
		}
	}
}

// HasAVX512BF16 reports whether the CPU runs the avx512bf16 kernel.
func HasAVX512BF16() bool { return hasAVX512BF16() }

// amxModelTile is amxTileModel behind the tile kernel's signature.
func amxModelTile(k16 int, a *uint32, lda int, b *uint32, out *float32) {
	amxTileModel(k16, unsafe.Slice(a, amxMR*lda/4), lda, unsafe.Slice(b, 16*k16*amxNR), unsafe.Slice(out, amxMR*amxNR))
}

// NewAMXModel returns an Impl whose GemmBF16 runs the AMX path (packing,
// blocking, epilogue) on the Go model of the tile kernel, on any CPU.
func NewAMXModel(threads int) *Impl {
	g, err := New(Options{BLAS: BLASGo, Kernel: KernelGo, Threads: threads})
	if err != nil {
		panic(err)
	}
	g.bf16 = bf16AMXArchWith(amxModelTile)
	return g
}

// AMXSupport is amxSupport: nil where the AMX kernel runs.
func AMXSupport() error { return amxSupport() }

// AMXSelfCheckModel runs the self-check on the Go model, or, broken, on
// the model with its last pair of k left out.
func AMXSelfCheckModel(broken bool) error {
	if !broken {
		return amxSelfCheck(amxModelTile)
	}
	return amxSelfCheck(func(k16 int, a *uint32, lda int, b *uint32, out *float32) {
		amxModelTile(k16, a, lda, b, out)
		as, bs, o := unsafe.Slice(a, amxMR*lda/4), unsafe.Slice(b, 16*k16*amxNR), unsafe.Slice(out, amxMR*amxNR)
		q := 16*k16 - 1
		for r := 0; r < amxMR; r++ {
			for j := 0; j < amxNR; j++ {
				wa, wb := as[r*lda/4+q], bs[q*amxNR+j]
				o[r*amxNR+j] -= F32(uint16(wa))*F32(uint16(wb)) + F32(uint16(wa>>16))*F32(uint16(wb>>16))
			}
		}
	})
}

// AMXTileConfig is LDTILECFG's operand.
func AMXTileConfig() [64]byte { return amxTileConfig }

// MustNew is New for tests: it stops the test on an error.
func MustNew(t testing.TB, o Options) *Impl {
	t.Helper()
	g, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	return g
}
