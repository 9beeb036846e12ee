package tensor

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
			for oh := 0; oh < w.OH; oh++ {
				addRow(dst[oh*w.wp:][:w.OW], src[oh*w.wp:])
			}
		}
	}
}

// addRow adds src onto dst elementwise.
func addRow(dst, src []float32) {
	src = src[:len(dst)]
	for i, v := range src {
		dst[i] += v
	}
}

// wideConvForward is im2colConvForward for stride 1.
func wideConvForward(yd, xd []float32, w2 *Tensor, bd []float32, g ConvGeom, relu bool) {
	wg := newWideGeom(g)
	O, K := w2.shape[0], w2.shape[1]
	L := g.OH * g.OW
	nb := wg.samples
	col := make([]float32, K*nb*wg.pos)
	out := make([]float32, O*nb*wg.pos)
	var xp []float32
	if wg.padded {
		xp = make([]float32, nb*wg.plane)
	}
	for n0 := 0; n0 < g.N; n0 += nb {
		m := min(nb, g.N-n0)
		cols := m * wg.pos
		src := xp
		if wg.padded {
			wg.padInto(xp, xd, n0, m)
		} else {
			src = xd[n0*wg.plane:]
		}
		wg.unfold(col, src, m)
		Gemm(FromSlice(out[:O*cols], O, cols), w2, FromSlice(col[:K*cols], K, cols), 1, 0)
		for o := 0; o < O; o++ {
			var bias float32
			if bd != nil {
				bias = bd[o]
			}
			for n := 0; n < m; n++ {
				src := out[o*cols+n*wg.pos:][:wg.pos]
				dst := yd[((n0+n)*O+o)*L:][:L]
				for oh := 0; oh < g.OH; oh++ {
					biasRow(dst[oh*g.OW:][:g.OW], src[oh*wg.wp:], bias, relu)
				}
			}
		}
	}
}

// wideConvBackward is im2colConvBackward for stride 1.
func wideConvBackward(a convGrads, g ConvGeom) {
	wg := newWideGeom(g)
	O, K := a.w2.shape[0], a.w2.shape[1]
	L := g.OH * g.OW
	nb := wg.samples
	col := make([]float32, K*nb*wg.pos)
	dyw := make([]float32, O*nb*wg.pos)
	var xp, dxp []float32
	if wg.padded {
		xp = make([]float32, nb*wg.plane)
		if a.dx != nil {
			dxp = make([]float32, nb*wg.plane)
		}
	}
	for n0 := 0; n0 < g.N; n0 += nb {
		m := min(nb, g.N-n0)
		cols := m * wg.pos
		// dy chunk [m, O, OH, OW] -> dyw [O, m·P] with zero wrap-around
		// columns (masked by a fused ReLU); db = its sums.
		for n := 0; n < m; n++ {
			for o := 0; o < O; o++ {
				i := ((n0+n)*O + o) * L
				src := a.dy[i:][:L]
				row := dyw[o*cols+n*wg.pos:][:wg.pos]
				for oh := 0; oh < g.OH; oh++ {
					dst := row[oh*wg.wp:][:g.OW]
					if a.mask != nil {
						reluMaskRow(dst, src[oh*g.OW:], a.mask[i+oh*g.OW:])
					} else {
						copy(dst, src[oh*g.OW:])
					}
					if oh < g.OH-1 {
						clear(row[oh*wg.wp+g.OW : (oh+1)*wg.wp])
					}
				}
				a.db[o] += sum64(row)
			}
		}
		src := xp
		if wg.padded {
			wg.padInto(xp, a.xd, n0, m)
		} else {
			src = a.xd[n0*wg.plane:]
		}
		wg.unfold(col, src, m)
		dt := FromSlice(dyw[:O*cols], O, cols)
		ct := FromSlice(col[:K*cols], K, cols)
		Gemm(a.dw, dt, ct.T(), 1, 1) // dw += dy·colᵀ
		if a.dx == nil {
			continue
		}
		Gemm(ct, a.w2.T(), dt, 1, 0) // dcol = wᵀ·dy, reusing col
		if !wg.padded {
			wg.fold(a.dx[n0*wg.plane:], col, m)
			continue
		}
		clear(dxp[:m*wg.plane])
		wg.fold(dxp, col, m)
		p := g.Padding
		for n := 0; n < m; n++ {
			for c := 0; c < g.C; c++ {
				pl := dxp[(n*g.C+c)*wg.hp*wg.wp:][:wg.hp*wg.wp]
				dst := a.dx[((n0+n)*g.C+c)*g.H*g.W:][:g.H*g.W]
				for h := 0; h < g.H; h++ {
					copy(dst[h*g.W:(h+1)*g.W], pl[(p+h)*wg.wp+p:])
				}
			}
		}
	}
}
