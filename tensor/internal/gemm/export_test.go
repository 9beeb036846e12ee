package gemm

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
