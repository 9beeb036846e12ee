package gemm

// packBuf holds one goroutine's packing buffers, reused across calls, and
// the scratch C of runSwapped.
type packBuf struct {
	a, b, t []float32
	ha, hb  []uint32  // bfloat16 slivers, a pair of k a word (gemm_bf16.go)
	wa, wb  []float32 // bfloat16 operands widened (gemm_bf16.go)
	t16     []uint16  // a float32 block rounded before packing, or a whole operand (GemmMixed)
	g       *Impl     // whose conversion rounds t16 (set by runBF16)
}

// grow returns s with length at least n, reallocating when needed.
func grow[T float32 | uint32](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

// split returns the start of part i of n items cut into parts pieces whose
// sizes are multiples of unit (except the last) and as even as possible.
func split(n, unit, parts, i int) int {
	units := (n + unit - 1) / unit
	return min(n, units*i/parts*unit)
}

// blockSize returns the block length for n items blocked by at most max
// (a multiple of unit): the fewest blocks, with sizes balanced and rounded
// up to a multiple of unit, so no block is a sliver.
func blockSize(n, max, unit int) int {
	if n <= max {
		return n
	}
	blocks := (n + max - 1) / max
	b := (n + blocks - 1) / blocks
	return (b + unit - 1) / unit * unit
}

// minFlopsPerThread is the work below which another goroutine costs more
// (start, join, its own packing) than it saves.
const minFlopsPerThread = 2 << 20

// partition chooses the tm×tn grid of C blocks the threads work on: at
// most threads blocks, at most one per minFlopsPerThread of work and per
// tile, and among those shapes the one packing the least (every block
// packs its rows of A and its columns of B: tn·m·k + tm·k·n).
func partition(m, n, k, threads, mr, nr int) (tm, tn int) {
	work := 2 * m * n * k
	t := min(threads, max(1, work/minFlopsPerThread))
	best := -1
	tm, tn = 1, 1
	for cm := 1; cm <= t; cm++ {
		cn := t / cm
		if cm*cn != t {
			continue
		}
		if cm > (m+mr-1)/mr || cn > (n+nr-1)/nr {
			continue
		}
		cost := cn*m + cm*n
		if best < 0 || cost < best {
			best, tm, tn = cost, cm, cn
		}
	}
	return tm, tn
}

// pick returns the kernel family for an m×n product: the wide one (when
// there is one) unless C has few columns or its tiles waste more of the
// padded area than the default family's do.
func (g *Impl) pick(m, n int) *arch {
	if g.wide == nil || n < g.wide.nr*3/4 {
		return g.arch
	}
	pad := func(ar *arch) int {
		return (m + ar.mr - 1) / ar.mr * ar.mr * ((n + ar.nr - 1) / ar.nr * ar.nr)
	}
	// The wide kernel is a few percent faster at equal padding.
	if pad(g.wide)*20 <= pad(g.arch)*21 {
		return g.wide
	}
	return g.arch
}

// run is cohort's blocked, parallel sgemm. Arguments are checked, m, n,
// k > 0 and alpha != 0.
func (g *Impl) run(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int, add *Addends, epi Epilogue) {
	ar := g.pick(m, n)
	tm, tn := partition(m, n, k, g.threads, ar.mr, ar.nr)
	if tm*tn > 1 && 2*m*n*k < g.coldMin && !g.pool.warm(g.threads-1) {
		tm, tn = 1, 1
	}
	if tm*tn == 1 {
		buf := g.bufs.Get().(*packBuf)
		ar.block(buf, transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, add, epi, 0, 0)
		g.bufs.Put(buf)
		return
	}
	g.runParts(ar, tm, tn, transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, add, epi)
}

// part returns the rows [i0, i1) and columns [j0, j1) of C in part t of
// a tm×tn split of an m×n C on mr×nr tiles (empty when there are more
// parts than tiles).
func part(m, n, mr, nr, tm, tn, t int) (i0, i1, j0, j1 int) {
	ti, tj := t/tn, t%tn
	return split(m, mr, tm, ti), split(m, mr, tm, ti+1), split(n, nr, tn, tj), split(n, nr, tn, tj+1)
}

// runParts computes C as tm×tn blocks, one part each, shared with the
// Impl's helpers.
func (g *Impl) runParts(ar *arch, tm, tn int, transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int, add *Addends, epi Epilogue) {
	g.pool.parallel(g.threads-1, tm*tn, func(t int) {
		i0, i1, j0, j1 := part(m, n, ar.mr, ar.nr, tm, tn, t)
		if i0 == i1 || j0 == j1 {
			return
		}
		var as, bs []float32
		if transA {
			as = a[i0:]
		} else {
			as = a[i0*lda:]
		}
		if transB {
			bs = b[j0*ldb:]
		} else {
			bs = b[j0:]
		}
		buf := g.bufs.Get().(*packBuf)
		ar.block(buf, transA, transB, i1-i0, j1-j0, k, alpha, as, lda, bs, ldb, beta, c[i0*ldc+j0:], ldc, add.sub(i0, j0), epi, i0, j0)
		g.bufs.Put(buf)
	})
}

// directMaxN is the widest product whose A the blocked path reads in place
// (arch.directA) instead of packing: packing A costs m·k copies whatever
// n is, and pays off only when each packed sliver feeds many B slivers.
// On Zen 3 (CPU time, GPT-mini's shapes) reading in place wins by 3-15%
// up to n = 128 (attention's n = 32..64 most) and loses from n = 512.
//
// wideDirectMaxN is the same bound for the AVX-512 6×64 kernel, whose
// in-place variant streams six rows of A against a 64-wide B sliver: on an
// Intel Xeon (family 6 model 207, one thread) it wins 5-30% up to n = 128
// (attention's q·kᵀ and dp most), and 2.5-4.5% at GPT-mini's n = 256, 384
// and 512 (projections on 2048 and 256 rows, k = 128; alternated rounds).
const (
	directMaxN     = 128
	wideDirectMaxN = 512
)

// useDirect reports whether block reads full slivers of op(A) in place:
// when the arch has a direct kernel, C has at most directMaxN columns, and
// A's row stride does not alias in the caches. A stride that is a multiple
// of 2 KiB (1 KiB when the kernel steps through A's rows, transA) maps the
// rows of a sliver onto a few cache sets; with the AVX2 kernel (Zen 3) the
// m = 512 weight gradient ran 12% slower in place than packed. The AVX-512
// 6×64 kernels (directAnyStride) read A in place faster than packed at
// every stride GPT-mini has on an Intel Xeon (family 6 model 207, one
// thread, alternated rounds): rows at a 2 KiB stride (fc2 forward, fc1
// input gradient: A [2048 or 256, 512]) 5-14%, and a transposed A (the
// weight gradients, A = dyᵀ, lda 128 to 512, 1 and 2 KiB included) 3-17%.
func (ar *arch) useDirect(transA bool, n, lda int) bool {
	if ar.directA == nil || n > ar.directMaxN {
		return false
	}
	if ar.directAnyStride {
		return true
	}
	if transA {
		return lda%256 != 0
	}
	return lda%512 != 0
}

// block runs the BLIS loop nest on one m×n block of C in the calling
// goroutine:
//
//	for each nc-wide panel of B and C            (jc)
//	  for each kc-deep slab of k                 (pc)  pack B panel: kc×nc
//	    for each mc-tall block of A and C        (ic)  pack A block: mc×kc
//	      for each nr-wide sliver of the panel   (jr)  B sliver stays in L1
//	        for each mr-tall sliver of the block (ir)  micro-kernel
//
// beta applies on the first slab only; later slabs accumulate. When
// useDirect says so, the micro-kernel reads full slivers of A in place and
// only a partial last sliver of each block is packed. epi, when not nil,
// runs on each mc×nc block of C as the last slab finishes it, while the
// block is still in L2; ei and ej are this block's origin in the C epi
// indexes.
func (ar *arch) block(buf *packBuf, transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int, add *Addends, epi Epilogue, ei, ej int) {
	kcMax := blockSize(k, ar.kc, 4)
	mcMax := blockSize(m, ar.mc, ar.mr)
	ncMax := blockSize(n, ar.nc, ar.nr)
	buf.a = grow(buf.a, (mcMax+ar.mr-1)/ar.mr*ar.mr*kcMax+ar.slack)
	buf.b = grow(buf.b, (ncMax+ar.nr-1)/ar.nr*ar.nr*kcMax+ar.slack)
	direct := ar.useDirect(transA, n, lda)
	// The addends go in the kernel where it takes them (full slivers of A
	// read in place), else on each tile after the kernel (a partial
	// sliver) or, when no tile's kernel takes them, on each block.
	inKernel := add != nil && direct && !transA && ar.directAddends != nil
	for jc := 0; jc < n; jc += ncMax {
		nc := min(ncMax, n-jc)
		for pc := 0; pc < k; pc += kcMax {
			kc := min(kcMax, k-pc)
			if transB {
				ar.packB(buf.b, b[jc*ldb+pc:], ldb, true, kc, nc)
			} else {
				ar.packB(buf.b, b[pc*ldb+jc:], ldb, false, kc, nc)
			}
			bet := beta
			if pc > 0 {
				bet = 1
			}
			last := pc+kc == k
			for ic := 0; ic < m; ic += mcMax {
				mc := min(mcMax, m-ic)
				// With direct, full slivers of A are read in place and
				// only a partial last one is packed, to buf.a[0:].
				packed := 0
				if direct {
					packed = mc / ar.mr * ar.mr
				}
				if packed < mc {
					if transA {
						ar.packA(buf.a, a[pc*lda+ic+packed:], lda, true, mc-packed, kc)
					} else {
						ar.packA(buf.a, a[(ic+packed)*lda+pc:], lda, false, mc-packed, kc)
					}
				}
				for jr := 0; jr < nc; jr += ar.nr {
					cols := min(ar.nr, nc-jr)
					bp := &buf.b[jr*kc]
					for ir := 0; ir < mc; ir += ar.mr {
						cp := &c[(ic+ir)*ldc+jc+jr]
						rows := min(ar.mr, mc-ir)
						switch {
						case ir >= packed:
							ar.kernel(kc, &buf.a[(ir-packed)*kc], bp, cp, ldc, alpha, bet, rows, cols)
							if inKernel && last {
								add.apply(c, ldc, ic+ir, jc+jr, rows, cols)
							}
						case transA:
							ar.directA(true, kc, &a[pc*lda+ic+ir], lda, bp, cp, ldc, alpha, bet, rows, cols)
						case inKernel && last:
							row, mat := add.ptrs(ic+ir, jc+jr)
							ar.directAddends(kc, &a[(ic+ir)*lda+pc], lda, bp, cp, ldc, alpha, bet, rows, cols, row, mat, add.LdMat)
						default:
							ar.directA(false, kc, &a[(ic+ir)*lda+pc], lda, bp, cp, ldc, alpha, bet, rows, cols)
						}
					}
				}
				if add != nil && !inKernel && last {
					add.apply(c, ldc, ic, jc, mc, nc)
				}
				if epi != nil && last {
					epi(ei+ic, ei+ic+mc, ej+jc, ej+jc+nc)
				}
			}
		}
	}
}
