package gemm

// bfloat16 products with float32 accumulation and a float32 result.
//
// # Error bound
//
// The inputs are bfloat16 values, so each product a·b (8-bit by 8-bit
// significands) is exact in float32; the only rounding is the float32
// accumulation. Every path adds the k products to a float32 sum, one
// rounded addition each (VDPBF16PS adds its lane's two products one after
// the other, or fused, which rounds less), then scales by alpha and adds
// beta·C, and a product split into kc-deep blocks re-reads C between
// blocks. With u = 2⁻²⁴ and γ_n = n·u/(1−n·u), the standard bound for a
// recursively summed dot product (Higham, Accuracy and Stability of
// Numerical Algorithms, §3.1) gives, for each output,
//
//	|ĉ − c| ≤ γ_{k+2}·(|alpha|·Σ_p |a_p||b_p| + |beta·C|)
//
// where c is the exact result on the bfloat16 inputs (k+2: k additions,
// the alpha scaling and the beta term; the blocked path's extra additions
// of C between blocks are among the k, as each block's partial sum starts
// from C instead of 0). When the inputs are float32 values x, y rounded to
// bfloat16 first, |a − x| ≤ 2⁻⁸|x| (round to nearest, 8-bit significand),
// so |ab − xy| ≤ (2·2⁻⁸ + 2⁻¹⁶)|x||y| adds to the bound
// (2⁻⁷ + 2⁻¹⁶)·|alpha|·Σ|x||y| against the float32 product.
//
// VDPBF16PS treats subnormal inputs as zero and flushes subnormal results
// (it ignores MXCSR): products of magnitude below 2⁻¹²⁶ may be lost on the
// AVX512-BF16 path, an absolute error below k·2⁻¹²⁶ beyond the bound; the
// widening paths keep them.

// bf16Arch is one bfloat16 kernel family: a micro-kernel computing an
// mr×nr tile of C from slivers packed by pairs of k, and its blocking.
//
// Packed layouts (for a block of kc steps along k, k2 = ⌈kc/2⌉ pairs),
// each pair one 32-bit word, its first value in the low half:
//
//	A sliver: k2 groups of mr pairs, pair (q, r) = op(A)[i0+r][p0+2q], op(A)[i0+r][p0+2q+1]
//	B sliver: k2 groups of nr pairs, pair (q, c) = op(B)[p0+2q][j0+c], op(B)[p0+2q+1][j0+c]
//
// Values past the edge of the matrix (rows, columns, and the second of
// the last pair when kc is odd) are packed as zeros.
type bf16Arch struct {
	name   string
	mr, nr int
	// mc×kc is the packed A block, kc×nr the packed B sliver, kc×nc the
	// packed B panel; kc is even.
	mc, kc, nc int
	// kernel computes C[r][c] = alpha·Σ a·b + beta·C[r][c] over k2 pairs,
	// for r < rows and c < cols, reading C only when beta != 0.
	kernel func(k2 int, a, b *uint32, c *float32, ldc int, alpha, beta float32, rows, cols int)
	// tile, when set, is an AMX tile kernel (gemm_amx.go), run by
	// blockAMX on its own layout in place of kernel.
	tile func(k16 int, a *uint32, lda int, b *uint32, out *float32)
}

// GemmBF16 computes C = alpha·op(A)·op(B) + beta·C with A and B bfloat16
// (their bits, see [BF16]) and C float32, with the contract of [Sgemm]
// otherwise, and accumulates in float32 on every path (see the bound
// above). It panics as Sgemm does on bad arguments and an invalid
// environment.
func GemmBF16(transA, transB bool, m, n, k int, alpha float32, a []uint16, lda int, b []uint16, ldb int, beta float32, c []float32, ldc int) {
	g, err := Default()
	if err != nil {
		panic(err.Error())
	}
	g.GemmBF16(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

// ToBF16 rounds src into dst with the [Default] implementation's
// conversion (see [Impl.ToBF16]).
func ToBF16(dst []uint16, src []float32) {
	g, err := Default()
	if err != nil {
		panic(err.Error())
	}
	g.ToBF16(dst, src)
}

// FromBF16 widens src into dst with the [Default] implementation's
// conversion (see [Impl.FromBF16]).
func FromBF16(dst []float32, src []uint16) {
	g, err := Default()
	if err != nil {
		panic(err.Error())
	}
	g.FromBF16(dst, src)
}

// BF16Kernel names the path GemmBF16 takes: "amx" for the TDPBF16PS tile
// kernel, "avx512bf16" for the VDPBF16PS kernel, or "widen/" and the float32 kernel (or "openblas")
// the widened product runs on.
func (g *Impl) BF16Kernel() string {
	switch {
	case g.bf16 != nil:
		return g.bf16.name
	case g.lib != nil:
		return "widen/" + BLASOpenBLAS
	}
	return "widen/" + g.arch.name
}

// GemmBF16Fused is [GemmBF16] followed by add and epi as [SgemmFused]
// applies them: the addends (after alpha and beta) and then epi on each
// block of C as soon as it holds its result, while it is in cache. add and
// epi may be nil.
func GemmBF16Fused(transA, transB bool, m, n, k int, alpha float32, a []uint16, lda int, b []uint16, ldb int, beta float32, c []float32, ldc int, add *Addends, epi Epilogue) {
	g, err := Default()
	if err != nil {
		panic(err.Error())
	}
	g.GemmBF16Fused(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, add, epi)
}

// Operand is a bfloat16 operand of [GemmMixed]: BF16 holds bfloat16
// bits, or else F32 holds float32 values that the product rounds to
// bfloat16 ([BF16], round to nearest even) as it packs them, block by
// block while they are in cache, rather than in a pass of its own over
// the whole matrix. The product's values are those of [GemmBF16] on the
// rounded matrix, bit for bit.
type Operand struct {
	BF16 []uint16
	F32  []float32
}

// F32 and Half make Operands.
func F32Operand(f []float32) Operand { return Operand{F32: f} }
func BF16Operand(h []uint16) Operand { return Operand{BF16: h} }

// from returns the operand starting at element off.
func (o Operand) from(off int) Operand {
	if o.BF16 != nil {
		return Operand{BF16: o.BF16[off:]}
	}
	return Operand{F32: o.F32[off:]}
}

// GemmMixed is [GemmBF16Fused] with each operand bfloat16 bits or float32
// values rounded as they are packed (see [Operand]).
func GemmMixed(transA, transB bool, m, n, k int, alpha float32, a Operand, lda int, b Operand, ldb int, beta float32, c []float32, ldc int, add *Addends, epi Epilogue) {
	g, err := Default()
	if err != nil {
		panic(err.Error())
	}
	g.GemmMixed(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, add, epi)
}

// GemmMixed is the package-level [GemmMixed] on g.
func (g *Impl) GemmMixed(transA, transB bool, m, n, k int, alpha float32, a Operand, lda int, b Operand, ldb int, beta float32, c []float32, ldc int, add *Addends, epi Epilogue) {
	if g.bf16 == nil || m == 0 || n == 0 || k == 0 || alpha == 0 {
		// The widening path (and the trivial cases) on rounded copies.
		ah, ra := g.roundAll(a, transA, m, k, lda)
		bh, rb := g.roundAll(b, transB, k, n, ldb)
		g.GemmBF16Fused(transA, transB, m, n, k, alpha, ah, lda, bh, ldb, beta, c, ldc, add, epi)
		if ra != nil {
			g.bufs.Put(ra)
		}
		if rb != nil {
			g.bufs.Put(rb)
		}
		return
	}
	checkOperand("A", transA, a, m, k, lda, m, n, k)
	checkOperand("B", transB, b, k, n, ldb, m, n, k)
	checkMatrix("C", false, c, m, n, ldc, m, n, k)
	add = add.checked(m, n)
	g.runBF16(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, add, epi)
}

// checkOperand is checkMatrix on whichever slice o holds, for an
// op(X) of rows×cols.
func checkOperand(name string, trans bool, o Operand, rows, cols, ld, m, n, k int) {
	if trans {
		rows, cols = cols, rows
	}
	if o.BF16 != nil {
		checkMatrix(name, trans, o.BF16, rows, cols, ld, m, n, k)
		return
	}
	checkMatrix(name, trans, o.F32, rows, cols, ld, m, n, k)
}

// roundAll returns o's stored extent as bfloat16 bits (op(X) of
// rows×cols, row stride ld): o.BF16 itself, or F32 rounded into a pooled
// buffer, handed back with it for the caller to return.
func (g *Impl) roundAll(o Operand, trans bool, rows, cols, ld int) ([]uint16, *packBuf) {
	if o.BF16 != nil || o.F32 == nil {
		return o.BF16, nil
	}
	if trans {
		rows, cols = cols, rows
	}
	if rows == 0 || cols == 0 {
		return nil, nil
	}
	n := (rows-1)*ld + cols
	buf := g.bufs.Get().(*packBuf)
	buf.t16 = growU16(buf.t16, n)
	g.ToBF16(buf.t16, o.F32[:n])
	return buf.t16, buf
}

func growU16(s []uint16, n int) []uint16 {
	if cap(s) < n {
		return make([]uint16, n)
	}
	return s[:n]
}

// GemmBF16 is the package-level [GemmBF16] on g.
func (g *Impl) GemmBF16(transA, transB bool, m, n, k int, alpha float32, a []uint16, lda int, b []uint16, ldb int, beta float32, c []float32, ldc int) {
	g.GemmBF16Fused(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, nil, nil)
}

// GemmBF16Fused is the package-level [GemmBF16Fused] on g.
func (g *Impl) GemmBF16Fused(transA, transB bool, m, n, k int, alpha float32, a []uint16, lda int, b []uint16, ldb int, beta float32, c []float32, ldc int, add *Addends, epi Epilogue) {
	checkArgs(transA, transB, m, n, k, a, lda, b, ldb, c, ldc)
	add = add.checked(m, n)
	switch {
	case m == 0 || n == 0:
		return
	case k == 0 || alpha == 0:
		scaleC(m, n, beta, c, ldc)
	case g.bf16 == nil:
		g.widenBF16(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
	default:
		g.runBF16(transA, transB, m, n, k, alpha, Operand{BF16: a}, lda, Operand{BF16: b}, ldb, beta, c, ldc, add, epi)
		return
	}
	// The paths without a blocked loop of their own add afterwards.
	if add != nil {
		add.apply(c, ldc, 0, 0, m, n)
	}
	if epi != nil {
		epi(0, m, 0, n)
	}
}

// widenBF16 is the portable path: A and B widened to float32 (exactly),
// then the float32 product, whose float32 FMAs on exact products round as
// the bound says.
func (g *Impl) widenBF16(transA, transB bool, m, n, k int, alpha float32, a []uint16, lda int, b []uint16, ldb int, beta float32, c []float32, ldc int) {
	widen := func(w []float32, s []uint16, ld, rows, cols int) []float32 {
		w = grow(w, rows*cols)
		for i := 0; i < rows; i++ {
			g.FromBF16(w[i*cols:(i+1)*cols], s[i*ld:i*ld+cols])
		}
		return w
	}
	ar, ac, br, bc := storedDims(transA, transB, m, n, k)
	// The widened operands live in a pooled buffer, apart from the one the
	// float32 product takes for its packing.
	buf := g.bufs.Get().(*packBuf)
	buf.wa = widen(buf.wa, a, lda, ar, ac)
	buf.wb = widen(buf.wb, b, ldb, br, bc)
	g.SgemmFused(transA, transB, m, n, k, alpha, buf.wa, ac, buf.wb, bc, beta, c, ldc, nil, nil)
	g.bufs.Put(buf)
}

// runBF16 is the blocked, parallel bfloat16 product on g.bf16, split as
// [Impl.run] splits float32 ones.
func (g *Impl) runBF16(transA, transB bool, m, n, k int, alpha float32, a Operand, lda int, b Operand, ldb int, beta float32, c []float32, ldc int, add *Addends, epi Epilogue) {
	ar := g.bf16
	tm, tn := partition(m, n, k, g.threads, ar.mr, ar.nr)
	if tm*tn > 1 && 2*m*n*k < g.coldMin && !g.pool.warm(g.threads-1) {
		tm, tn = 1, 1
	}
	if tm*tn == 1 {
		buf := g.bufs.Get().(*packBuf)
		buf.g = g
		ar.block(buf, transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, add, epi, 0, 0)
		g.bufs.Put(buf)
		return
	}
	g.pool.parallel(g.threads-1, tm*tn, func(t int) {
		i0, i1, j0, j1 := part(m, n, ar.mr, ar.nr, tm, tn, t)
		if i0 == i1 || j0 == j1 {
			return
		}
		// Each operand's offset for its layout (a row offset of a
		// transposed operand can lie past its end).
		ao, bo := i0*lda, j0
		if transA {
			ao = i0
		}
		if transB {
			bo = j0 * ldb
		}
		as, bs := a.from(ao), b.from(bo)
		buf := g.bufs.Get().(*packBuf)
		buf.g = g
		ar.block(buf, transA, transB, i1-i0, j1-j0, k, alpha, as, lda, bs, ldb, beta, c[i0*ldc+j0:], ldc, add.sub(i0, j0), epi, i0, j0)
		g.bufs.Put(buf)
	})
}

// block runs the BLIS loop nest (see arch.block) on one m×n block of C,
// whose first element is C[ei][ej] of the whole product (what epi is
// told), adding add and running epi on each block once it is final.
func (ar *bf16Arch) block(buf *packBuf, transA, transB bool, m, n, k int, alpha float32, a Operand, lda int, b Operand, ldb int, beta float32, c []float32, ldc int, add *Addends, epi Epilogue, ei, ej int) {
	if ar.tile != nil {
		// The AMX tiles read bfloat16 bits: float32 operands are rounded
		// whole first, and the addends and epi follow the product.
		ar.blockAMX(buf, transA, transB, m, n, k, alpha, buf.bitsOf(a, transA, m, k, lda), lda, buf.bitsOf(b, transB, k, n, ldb), ldb, beta, c, ldc)
		if add != nil {
			add.apply(c, ldc, 0, 0, m, n)
		}
		if epi != nil {
			epi(ei, ei+m, ej, ej+n)
		}
		return
	}
	kcMax := blockSize(k, ar.kc, 2)
	mcMax := blockSize(m, ar.mc, ar.mr)
	ncMax := blockSize(n, ar.nc, ar.nr)
	k2Max := (kcMax + 1) / 2
	buf.ha = grow(buf.ha, (mcMax+ar.mr-1)/ar.mr*ar.mr*k2Max)
	buf.hb = grow(buf.hb, (ncMax+ar.nr-1)/ar.nr*ar.nr*k2Max)
	for jc := 0; jc < n; jc += ncMax {
		nc := min(ncMax, n-jc)
		for pc := 0; pc < k; pc += kcMax {
			kc := min(kcMax, k-pc)
			k2 := (kc + 1) / 2
			if transB {
				buf.packOperand(buf.hb, b.from(jc*ldb+pc), ldb, true, nc, kc, ar.nr)
			} else {
				buf.packOperand(buf.hb, b.from(pc*ldb+jc), ldb, false, nc, kc, ar.nr)
			}
			bet := beta
			if pc > 0 {
				bet = 1
			}
			for ic := 0; ic < m; ic += mcMax {
				mc := min(mcMax, m-ic)
				if transA {
					buf.packOperand(buf.ha, a.from(pc*lda+ic), lda, false, mc, kc, ar.mr)
				} else {
					buf.packOperand(buf.ha, a.from(ic*lda+pc), lda, true, mc, kc, ar.mr)
				}
				for jr := 0; jr < nc; jr += ar.nr {
					cols := min(ar.nr, nc-jr)
					bp := &buf.hb[jr*k2]
					for ir := 0; ir < mc; ir += ar.mr {
						ar.kernel(k2, &buf.ha[ir*k2], bp, &c[(ic+ir)*ldc+jc+jr], ldc, alpha, bet, min(ar.mr, mc-ir), cols)
					}
				}
				if pc+kc == k {
					if add != nil {
						add.apply(c, ldc, ic, jc, mc, nc)
					}
					if epi != nil {
						epi(ei+ic, ei+ic+mc, ej+jc, ej+jc+nc)
					}
				}
			}
		}
	}
}

// packOperand is packBF16 on o: its bits, or its float32 values rounded
// first into buf.t16 (the block alone, rows of an even length so that
// the vector packers apply), where the packer reads them from cache.
func (buf *packBuf) packOperand(dst []uint32, o Operand, ld int, rowsAlongN bool, n, kc, w int) {
	if o.BF16 != nil {
		packBF16(dst, o.BF16, ld, rowsAlongN, n, kc, w)
		return
	}
	rows, cols := n, kc // the block as stored: n rows of kc, or kc rows of n
	if !rowsAlongN {
		rows, cols = kc, n
	}
	lt := (cols + 1) &^ 1
	buf.t16 = growU16(buf.t16, rows*lt)
	for r := range rows {
		buf.g.ToBF16(buf.t16[r*lt:r*lt+cols], o.F32[r*ld:r*ld+cols])
	}
	packBF16(dst, buf.t16, lt, rowsAlongN, n, kc, w)
}

// bitsOf returns o's bfloat16 bits for an op(X) of rows×cols with row
// stride ld: o.BF16, or its float32 values rounded into a new slice.
func (buf *packBuf) bitsOf(o Operand, trans bool, rows, cols, ld int) []uint16 {
	if o.BF16 != nil || o.F32 == nil {
		return o.BF16
	}
	if trans {
		rows, cols = cols, rows
	}
	if rows == 0 || cols == 0 {
		return nil
	}
	h := make([]uint16, (rows-1)*ld+cols)
	buf.g.ToBF16(h, o.F32[:len(h)])
	return h
}

// packBF16 packs the n×kc block whose slivers run along n, w pairs wide,
// by pairs of k, each pair one little-endian word (the first of the pair
// in its low half):
//
//	dst[s*w*k2 + q*w + r] = X(s*w + r, 2q) | X(s*w + r, 2q + 1)<<16
//
// where k2 = ⌈kc/2⌉ and X(i, p) = src[i*ld + p] when rowsAlongN, else
// src[p*ld + i]; positions past n or kc are zero.
func packBF16(dst []uint32, src []uint16, ld int, rowsAlongN bool, n, kc, w int) {
	if rowsAlongN && packBF16Rows(dst, src, ld, n, kc, w) || !rowsAlongN && packBF16Cols(dst, src, ld, n, kc, w) {
		return
	}
	packBF16Go(dst, src, ld, rowsAlongN, n, kc, w)
}

// packBF16Go is packBF16 in Go.
func packBF16Go(dst []uint32, src []uint16, ld int, rowsAlongN bool, n, kc, w int) {
	k2 := (kc + 1) / 2
	for s := 0; s*w < n; s++ {
		out := dst[s*w*k2 : (s+1)*w*k2]
		rows := min(w, n-s*w)
		if rowsAlongN {
			for r := 0; r < rows; r++ {
				row := src[(s*w+r)*ld:][:kc]
				o := out[r:]
				q := 0
				for ; 2*q+1 < kc; q++ {
					o[q*w] = uint32(row[2*q]) | uint32(row[2*q+1])<<16
				}
				if kc%2 == 1 {
					o[q*w] = uint32(row[kc-1])
				}
			}
		} else {
			p := 0
			for ; p+1 < kc; p += 2 {
				r0 := src[p*ld+s*w:][:rows]
				r1 := src[(p+1)*ld+s*w:][:rows]
				o := out[p/2*w:][:rows]
				for r := range o {
					o[r] = uint32(r0[r]) | uint32(r1[r])<<16
				}
			}
			if kc%2 == 1 {
				r0 := src[p*ld+s*w:][:rows]
				o := out[p/2*w:][:rows]
				for r := range o {
					o[r] = uint32(r0[r])
				}
			}
		}
		if rows < w {
			for q := 0; q < k2; q++ {
				clear(out[q*w+rows : (q+1)*w])
			}
		}
	}
}
