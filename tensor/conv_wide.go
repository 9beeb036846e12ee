package tensor

import "github.com/cohortml/cohort/tensor/internal/vec"

// The stride-1 convolution path: "wide" unfolding.
//
// Pad each input plane to Hp×Wp (Hp = H+2p, Wp = W+2p) and number the
// output positions of a sample over the padded width, p = oh·Wp + ow, for
// ow in [0, Wp) instead of [0, OW). Then the input pixel that kernel tap
// k = (c, i, j) reads for position p is the padded sample's element
// off(k) + p, with off(k) = c·Hp·Wp + i·Wp + j, for every p. So row k of
// the unfolded matrix is one contiguous slice of the padded input, copied
// with a single copy per sample instead of one per output row, and the
// fold of the input gradient (col2im) adds contiguous rows back.
//
// The price is the Wp−OW "wrap-around" columns at the end of each output
// row but the last, whose values mix the end of one input row with the
// start of the next: their outputs are computed and dropped. A sample
// spans P = (OH−1)·Wp + OW positions, which keeps every read inside the
// sample's padded planes: off(k) + P − 1 ≤ C·Hp·Wp − 1. In the backward
// pass the output gradient is laid out the same way with zeros in the
// wrap-around columns, so they contribute nothing to the weight gradient,
// and the fold skips them.
//
// Where the CPU has them (vec.HasConvTiles), the forward product and the
// weight gradient read those rows straight from the padded input instead
// of copying them into a matrix first ("direct" tiles, conv_direct.go);
// the input gradient always goes through the matrix and the fold.
//
// The unfolding itself is that of Chellapilla et al., "High Performance
// Convolutional Neural Networks for Document Processing" (2006); only the
// numbering of the output columns differs.

// wideGeom is the layout of the wide unfolding for one convolution.
type wideGeom struct {
	ConvGeom
	hp, wp  int   // padded plane height and width
	plane   int   // C·Hp·Wp: one padded sample
	pos     int   // P: wide output positions per sample
	offs    []int // off(k) for every kernel tap k = (c, i, j)
	padded  bool  // the input needs a padded copy (Padding > 0)
	samples int   // samples per chunk (one GEMM)
}

func newWideGeom(g ConvGeom) wideGeom {
	w := wideGeom{ConvGeom: g, hp: g.H + 2*g.Padding, wp: g.W + 2*g.Padding, padded: g.Padding > 0}
	w.plane = g.C * w.hp * w.wp
	w.pos = (g.OH-1)*w.wp + g.OW
	w.offs = make([]int, 0, g.C*g.KH*g.KW)
	for c := 0; c < g.C; c++ {
		for i := 0; i < g.KH; i++ {
			for j := 0; j < g.KW; j++ {
				w.offs = append(w.offs, c*w.hp*w.wp+i*w.wp+j)
			}
		}
	}
	// About 1024 GEMM columns per chunk, fewer when the unfolded chunk
	// would outgrow a typical L2 share (256 KiB), never less than a sample.
	K := max(len(w.offs), 1)
	cols := min(1024, max(256, (256<<10)/4/K))
	w.samples = max(1, min(g.N, cols/max(w.pos, 1)))
	return w
}

// samplesOf returns samples [n0, n0+m) of the contiguous input xd as the
// wide path reads them: padded into xp when the convolution pads, else in
// place.
func (w *wideGeom) samplesOf(xp, xd []float32, n0, m int) []float32 {
	if !w.padded {
		return xd[n0*w.plane:]
	}
	w.padInto(xp, xd, n0, m)
	return xp
}

// padInto writes samples [n0, n0+m) of the contiguous input xd into dst
// ([m][C][Hp][Wp]) with zero borders.
func (w *wideGeom) padInto(dst, xd []float32, n0, m int) {
	p, H, W := w.Padding, w.H, w.W
	for n := 0; n < m; n++ {
		for c := 0; c < w.C; c++ {
			src := xd[((n0+n)*w.C+c)*H*W:][:H*W]
			pl := dst[(n*w.C+c)*w.hp*w.wp:][:w.hp*w.wp]
			clear(pl[:p*w.wp])
			clear(pl[(p+H)*w.wp:])
			for h := 0; h < H; h++ {
				row := pl[(p+h)*w.wp:][:w.wp]
				clear(row[:p])
				copy(row[p:p+W], src[h*W:(h+1)*W])
				clear(row[p+W:])
			}
		}
	}
}

// unfold writes the wide unfolding of m padded samples xp ([m][C][Hp][Wp])
// into col [K, m·P].
func (w *wideGeom) unfold(col, xp []float32, m int) {
	cols := m * w.pos
	for k, off := range w.offs {
		row := col[k*cols:][:cols]
		for n := 0; n < m; n++ {
			copy(row[n*w.pos:(n+1)*w.pos], xp[n*w.plane+off:])
		}
	}
}

// fold adds dcol [K, m·P], skipping the wrap-around columns, onto the m
// padded samples dxp ([m][C][Hp][Wp]): the adjoint of unfold.
func (w *wideGeom) fold(dxp, dcol []float32, m int) {
	cols := m * w.pos
	for k, off := range w.offs {
		row := dcol[k*cols:][:cols]
		for n := 0; n < m; n++ {
			src := row[n*w.pos:][:w.pos]
			dst := dxp[n*w.plane+off:][:w.pos]
			vec.AddRows(dst, w.wp, src, w.wp, w.OH, w.OW)
		}
	}
}

// layout returns the chunk layout of m samples.
func (w *wideGeom) layout(m int) chunkLayout {
	return chunkLayout{cols: m * w.pos, span: w.pos, rowStride: w.wp}
}

// wideConvForward is im2colConvForward for stride 1.
func wideConvForward(xd []float32, w2 *Tensor, g ConvGeom, ep *convEpilogue) {
	wg := newWideGeom(g)
	if useConvTiles() {
		directConvForward(&wg, xd, w2, ep)
		return
	}
	O, K := w2.shape[0], w2.shape[1]
	nb := wg.samples
	col, out := scratch(K*nb*wg.pos), scratch(O*nb*wg.pos)
	var xp []float32
	if wg.padded {
		xp = scratch(nb * wg.plane)
	}
	defer func() { freeScratch(col, out, xp) }()
	for n0 := 0; n0 < g.N; n0 += nb {
		m := min(nb, g.N-n0)
		l := wg.layout(m)
		src := wg.samplesOf(xp, xd, n0, m)
		wg.unfold(col, src, m)
		Gemm(FromSlice(out[:O*l.cols], O, l.cols), w2, FromSlice(col[:K*l.cols], K, l.cols), 1, 0)
		ep.emit(out, l, g, O, n0, m)
	}
}

// wideConvBackward is im2colConvBackward for stride 1.
func wideConvBackward(pr *convPrologue, a convGrads, g ConvGeom) {
	wg := newWideGeom(g)
	O, K := a.w2.shape[0], a.w2.shape[1]
	// Chunks of nb samples, whose output gradient (and padded input) stay
	// cache-sized; the unfolded matrix is built for sub of them at a time.
	// Without it, the direct weight-gradient tiles take larger chunks.
	sub := wg.samples
	nb := sub
	var dws *directWeightGrad
	if useConvTiles() {
		dws = newDirectWeightGrad(&wg, O)
		defer dws.finish(a.dw.Data())
		nb = max(sub, min(g.N, (256<<10)/4/max(O*wg.pos+wg.plane, 1)))
	}
	var col []float32
	if dws == nil || a.dx != nil {
		col = scratch(K * sub * wg.pos)
	}
	dyw := scratch(O * nb * wg.pos)
	var xp, dxp []float32
	if wg.padded {
		xp = scratch(nb * wg.plane)
		if a.dx != nil {
			dxp = scratch(sub * wg.plane)
		}
	}
	defer func() { freeScratch(col, dyw, xp, dxp) }()
	for n0 := 0; n0 < g.N; n0 += nb {
		m := min(nb, g.N-n0)
		l := wg.layout(m)
		pr.gather(dyw, l, g, a.db, n0, m)
		src := wg.samplesOf(xp, a.xd, n0, m)
		if dws != nil {
			dws.add(src, dyw, l, m)
			if a.dx == nil {
				continue
			}
		}
		dy := FromSlice(dyw[:O*l.cols], O, l.cols)
		for s0 := 0; s0 < m; s0 += sub {
			ms := min(sub, m-s0)
			cols := ms * wg.pos
			dt := dy.Narrow(1, s0*wg.pos, cols)
			ct := FromSlice(col[:K*cols], K, cols)
			if dws == nil {
				wg.unfold(col, src[s0*wg.plane:], ms)
				Gemm(a.dw, dt, ct.T(), 1, 1) // dw += dy·colᵀ
			}
			if a.dx == nil {
				continue
			}
			Gemm(ct, a.w2.T(), dt, 1, 0) // dcol = wᵀ·dy
			wg.foldInput(a.dx, dxp, col, n0+s0, ms)
		}
	}
}

// foldInput adds dcol ([K, m·P]) onto samples [n0, n0+m) of the input
// gradient dx, through the padded scratch dxp when the input is padded.
func (w *wideGeom) foldInput(dx, dxp, dcol []float32, n0, m int) {
	if !w.padded {
		w.fold(dx[n0*w.plane:], dcol, m)
		return
	}
	clear(dxp[:m*w.plane])
	w.fold(dxp, dcol, m)
	p := w.Padding
	for n := 0; n < m; n++ {
		for c := 0; c < w.C; c++ {
			pl := dxp[(n*w.C+c)*w.hp*w.wp:][:w.hp*w.wp]
			dst := dx[((n0+n)*w.C+c)*w.H*w.W:][:w.H*w.W]
			for h := 0; h < w.H; h++ {
				copy(dst[h*w.W:(h+1)*w.W], pl[(p+h)*w.wp+p:])
			}
		}
	}
}
