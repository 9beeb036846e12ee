package gemm

// The transposed-output path for C = A·Bᵀ with few rows of C (a layer's
// forward product y = x·Wᵀ on a small batch): B (n×k, stored along k) is
// the large operand and each of its elements is used by only m ≤ 64
// columns. The blocked path would transpose all of B into packed slivers
// for that little reuse. Instead this path computes Cᵀ = B·Aᵀ with a
// kernel that broadcasts B's elements straight from its rows (rowAKernel),
// packs only the small Aᵀ (k×m, one 64-wide sliver), and transposes the
// n×m result into C. B is read once, in place, row by row.

// rowAKernel is the 6×64 kernel reading its A operand in place, lda apart
// (see asmgen's genKernel512RowA). All 6 rows of A are read.
type rowAKernel func(k int, a *float32, lda int, b, c *float32, ldc int, alpha, beta float32, rows int, nmask uint64)

const (
	rowAMr    = 6
	rowANr    = 64
	rowAKc    = 128 // k per slab: the packed Aᵀ slab, kc×64, stays in L1
	rowAMaxM  = rowANr
	rowAMinNK = 64
	// rowAMinM: with fewer rows of C the kernel's 64 lanes are too empty
	// and the blocked path wins (CPU time on Zen 5 for n = k = 1024: m = 64
	// 165 against 131 GFLOP/s, m = 48 even, m = 32 88 against 113).
	rowAMinM = 49
)

// useRowA reports whether the product takes the transposed-output path:
// A·Bᵀ with 49 to 64 rows of C (rowAMinM, or any number down to 1 under
// tests' AnyRowA) and enough columns and depth for B's packing to
// dominate the blocked path's overhead.
func (g *Impl) useRowA(transA, transB bool, m, n, k int) bool {
	return g.rowA != nil && !transA && transB && m <= rowAMaxM && (m >= rowAMinM || g.anyRowA) &&
		n >= rowAMinNK && k >= rowAMinNK
}
