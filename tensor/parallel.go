package tensor

import "github.com/cohortml/cohort/tensor/internal/gemm"

// Work between products shares the GEMM's threads (see
// docs/PERFORMANCE.md, "Threads within a process").

// serialOnly makes parallelRanges run everything on the caller (tests
// compare the two).
var serialOnly = false

// parallelRanges cuts [0, n) into contiguous ranges of at least minEach
// (boundaries at multiples of align, so that vector kernels split their
// work where they would anyway), at most one per GEMM thread, and runs fn
// on each, in parallel on the GEMM's helper goroutines. The ranges must
// be independent; results are then the same as one fn(0, n).
func parallelRanges(n, minEach, align int, fn func(lo, hi int)) {
	parts := 1
	if g, err := gemm.Default(); err == nil && !serialOnly {
		parts = min(g.Threads(), n/max(minEach, 1))
		if parts > 1 {
			g.Parallel(parts, func(p int) {
				lo, hi := n*p/parts/align*align, n
				if p+1 < parts {
					hi = n * (p + 1) / parts / align * align
				}
				if lo < hi {
					fn(lo, hi)
				}
			})
			return
		}
	}
	fn(0, n)
}

// elementwiseMin is the fewest elements worth a thread of their own in an
// elementwise pass.
const elementwiseMin = 64 << 10
