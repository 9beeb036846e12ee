package gemm

// The triangular path: C = alpha·op(A)·op(B) + beta·C where op(A) is
// square and triangular, as attention's probabilities are under a causal
// mask (and their gradient with them): y = p·v and dq = ds·k multiply by a
// lower-triangular matrix, dv = pᵀ·g and dk = dsᵀ·q by an upper one. Each
// mr-row sliver of C packs and multiplies only the columns of its rows of
// op(A) that can be non-zero, which skips about a third of the work at
// attention's sizes (a sliver's triangle is computed as a rectangle), and
// the product runs on the calling goroutine with none of the blocked
// path's splitting: it is made for many small products, each caller
// running its own.

// SgemmTriangular computes C = alpha·op(A)·op(B) + beta·C for an m×m
// op(A) that is lower triangular (op(A)[i][p] = 0 for p > i) or, with
// upper, upper triangular (op(A)[i][p] = 0 for p < i), op(B) m×n and C
// m×n, with the argument conventions of [Sgemm] (k = m). The entries of
// op(A) outside its triangle must be zero: they may or may not be read.
// It runs on the process-wide [Default] implementation, on the calling
// goroutine.
func SgemmTriangular(transA, transB, upper bool, m, n int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	g, err := Default()
	if err != nil {
		panic(err.Error())
	}
	g.SgemmTriangular(transA, transB, upper, m, n, alpha, a, lda, b, ldb, beta, c, ldc)
}

// SgemmTriangular is the package-level [SgemmTriangular] on g.
func (g *Impl) SgemmTriangular(transA, transB, upper bool, m, n int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	checkArgs(transA, transB, m, n, m, a, lda, b, ldb, c, ldc)
	if m == 0 || n == 0 {
		return
	}
	ar := g.pick(m, n)
	if g.lib != nil || alpha == 0 || m > ar.kc || n > ar.nc {
		// One slab of k and one panel of B only; otherwise the whole
		// product, zeros included.
		g.Sgemm(transA, transB, m, n, m, alpha, a, lda, b, ldb, beta, c, ldc)
		return
	}
	buf := g.bufs.Get().(*packBuf)
	defer g.bufs.Put(buf)
	kc := m
	// With a colsA kernel, the full slivers of a transposed A are read in
	// place (attention's dv = pᵀ·g and dk = dsᵀ·q): each is read once, and
	// packing it cost as much as multiplying. B is packed all the same:
	// every sliver of A reads all of it, and in a training step its rows
	// (strided heads of q, k, v) are out of L1; read in place, a GPT-mini
	// step was no faster (in-process alternation), against 1.7% faster
	// for A alone.
	inPlaceA := g.triangularInPlace && ar.colsA != nil && transA
	buf.b = grow(buf.b, (n+ar.nr-1)/ar.nr*ar.nr*kc+ar.slack)
	ar.packB(buf.b, b, ldb, transB, kc, n)
	buf.a = grow(buf.a, ar.mr*kc+ar.slack)
	for ir := 0; ir < m; ir += ar.mr {
		rows := min(ar.mr, m-ir)
		// Rows ir..ir+rows-1 of op(A) can be non-zero in columns [p0, p1).
		p0, p1 := 0, ir+rows
		if upper {
			p0, p1 = ir, m
		}
		kk := p1 - p0
		inPlace := inPlaceA && rows == ar.mr
		switch {
		case inPlace:
		case transA:
			ar.packA(buf.a, a[p0*lda+ir:], lda, true, rows, kk)
		default:
			ar.packA(buf.a, a[ir*lda+p0:], lda, false, rows, kk)
		}
		for jr := 0; jr < n; jr += ar.nr {
			// Group p0 of sliver jr/nr: the packed B rows from p0 on.
			bp, cp, cols := &buf.b[jr*kc+p0*ar.nr], &c[ir*ldc+jr], min(ar.nr, n-jr)
			if inPlace {
				ar.colsA(kk, &a[p0*lda+ir], lda, bp, cp, ldc, alpha, beta, rows, cols)
			} else {
				ar.kernel(kk, &buf.a[0], bp, cp, ldc, alpha, beta, rows, cols)
			}
		}
	}
}

// SgemmLowerNT computes the lower triangle (j ≤ i) of C = alpha·A·Bᵀ for
// A and B m×k, stored row-major lda and ldb apart, and C m×m: attention's
// causal scores q·kᵀ and their gradient's g·vᵀ. C's entries above the
// diagonal are unspecified: left as they were, or overwritten. It runs on
// the process-wide [Default] implementation, on the calling goroutine.
func SgemmLowerNT(m, k int, alpha float32, a []float32, lda int, b []float32, ldb int, c []float32, ldc int) {
	g, err := Default()
	if err != nil {
		panic(err.Error())
	}
	g.SgemmLowerNT(m, k, alpha, a, lda, b, ldb, c, ldc)
}

// SgemmLowerNT is the package-level [SgemmLowerNT] on g.
//
// With the 6×64 kernel that reads A's rows in place (AVX-512), Bᵀ is
// packed once into one 64-wide sliver and each block of six rows of C
// runs one kernel call over A's rows where they lie, storing only the
// columns up to its last row's diagonal: no packing of A and none of the
// blocked path's set-up per block. For GPT-mini's attention (m = 64,
// k = 32, both products), one pinned core, 41 alternated runs twice: the
// forward pass took 0.97 and 0.98 of its time, the backward pass 0.985.
// Each block runs on a variant of the kernel only as wide as its columns
// up to the diagonal (16, 32, 48 or 64), which skips a third of the
// multiplies at m = 64: attention's forward pass then took 1/1.072 and
// 1/1.074 of its time, its backward pass 1/1.049 and 1/1.065 (41
// alternated runs of 10, twice, medians; quartiles all above 1.02).
// Every entry is the same sum in the same order as the blocked path's,
// so the results are equal bit for bit (TestSgemmLowerNT).
func (g *Impl) SgemmLowerNT(m, k int, alpha float32, a []float32, lda int, b []float32, ldb int, c []float32, ldc int) {
	checkArgs(false, true, m, m, k, a, lda, b, ldb, c, ldc)
	if m == 0 {
		return
	}
	if g.rowA == nil || g.lib != nil || alpha == 0 || k == 0 || m < rowAMr || m > rowANr || k > rowAKc {
		g.Sgemm(false, true, m, m, k, alpha, a, lda, b, ldb, 0, c, ldc)
		return
	}
	g.lowerNT(m, k, alpha, a, lda, b, ldb, c, ldc)
}
