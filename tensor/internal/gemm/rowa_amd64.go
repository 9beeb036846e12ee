package gemm

// runRowA runs the transposed-output path, split over threads by columns
// of C (rows of B).
func (g *Impl) runRowA(m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	parts := min(g.threads, max(1, 2*m*n*k/minFlopsPerThread), (n+rowAMr-1)/rowAMr)
	if parts > 1 && 2*m*n*k < g.coldMin && !g.pool.warm(g.threads-1) {
		parts = 1
	}
	if parts == 1 {
		g.rowABlock(m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
		return
	}
	g.pool.parallel(g.threads-1, parts, func(t int) {
		j0, j1 := split(n, 16, parts, t), split(n, 16, parts, t+1)
		if j0 < j1 {
			g.rowABlock(m, j1-j0, k, alpha, a, lda, b[j0*ldb:], ldb, beta, c[j0:], ldc)
		}
	})
}

// rowABlock computes the m×n block of C = alpha·A·Bᵀ + beta·C on the
// calling goroutine (m ≤ 64).
func (g *Impl) rowABlock(m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	buf := g.bufs.Get().(*packBuf)
	defer g.bufs.Put(buf)
	kc := min(k, rowAKc)
	// buf.a: the packed Aᵀ slab (kc×64); buf.t: Cᵀ (n×m); buf.b: the last
	// rows of B, padded to 6 (rowAMr·kc).
	buf.a = grow(buf.a, kc*rowANr)
	buf.t = grow(buf.t, n*m)
	buf.b = grow(buf.b, rowAMr*kc)
	t := buf.t
	tb := float32(0)
	if beta != 0 {
		// Cᵀ starts as C transposed; the kernel scales it by beta.
		for i := 0; i < m; i += 16 {
			rows := min(16, m-i)
			packT16(&t[i], m, &c[i*ldc], ldc, rows, n, rows)
		}
		tb = beta
	}
	mask := bits(m)
	full := n / rowAMr * rowAMr
	for pc := 0; pc < k; pc += kc {
		kk := min(kc, k-pc)
		// Aᵀ slab: pa[p*64 + i] = A[i][pc+p] for i < m, zero above.
		for i := 0; i < m; i += 16 {
			rows := min(16, m-i)
			packT16(&buf.a[i], rowANr, &a[i*lda+pc], lda, rows, kk, rows)
		}
		bet := tb
		if pc > 0 {
			bet = 1
		}
		for j := 0; j < full; j += rowAMr {
			g.rowA(kk, &b[j*ldb+pc], ldb, &buf.a[0], &t[j*m], m, alpha, bet, rowAMr, mask)
		}
		if rest := n - full; rest > 0 {
			// The last rows of B, copied to a full 6-row block (the
			// kernel reads all 6).
			pad := buf.b[:rowAMr*kk]
			for r := 0; r < rowAMr; r++ {
				copy(pad[r*kk:(r+1)*kk], b[min(full+r, n-1)*ldb+pc:][:kk])
			}
			g.rowA(kk, &pad[0], kk, &buf.a[0], &t[full*m], m, alpha, bet, rest, mask)
		}
	}
	// C = Cᵀᵀ.
	for j := 0; j < n; j += 16 {
		rows := min(16, n-j)
		packT16(&c[j], ldc, &t[j*m], m, rows, m, rows)
	}
}

// lowerNT is SgemmLowerNT's path on the row-A kernel (m in [6, 64], k ≤
// rowAKc), which comes with the wide family whose packing it uses.
func (g *Impl) lowerNT(m, k int, alpha float32, a []float32, lda int, b []float32, ldb int, c []float32, ldc int) {
	buf := g.bufs.Get().(*packBuf)
	defer g.bufs.Put(buf)
	// Bᵀ as one sliver of the wide family: pb[p*64 + j] = B[j][p] for
	// j < m, zero above.
	buf.b = grow(buf.b, k*rowANr+g.wide.slack)
	g.wide.packB(buf.b, b, ldb, true, k, m)
	for i := 0; i < m; i += rowAMr {
		// The kernel reads six rows of A: the last block moves up to end
		// at row m, computing its first rows again (to the same values).
		i0 := min(i, m-rowAMr)
		// Only the columns up to the block's last row's diagonal: on the
		// kernel as wide as they need, in steps of 16 (each column's sum
		// is the same on every width).
		cols := min(m, i0+rowAMr)
		kern := g.rowA
		if g.narrowLower {
			switch (cols + 15) / 16 {
			case 1:
				kern = kernelAVX512x6x16rw
			case 2:
				kern = kernelAVX512x6x32rw
			case 3:
				kern = kernelAVX512x6x48rw
			}
		}
		kern(k, &a[i0*lda], lda, &buf.b[0], &c[i0*ldc], ldc, alpha, 0, rowAMr, bits(cols))
	}
}
