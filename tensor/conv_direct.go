package tensor

import (
	"sync"

	"github.com/cohortml/cohort/tensor/internal/gemm"
	"github.com/cohortml/cohort/tensor/internal/vec"
)

// Direct tiles for the stride-1 path (see conv_wide.go): the forward
// product as 6-channel × 64-position tiles and the weight gradient as
// 4-tap × 6-channel dot products, both reading the padded input through
// the taps' offsets (vec.ConvTile6x64, vec.Dot4x6) instead of an unfolded
// copy.

// useConvTiles reports whether stride-1 convolutions use the direct
// tiles: where they run as assembly (vec.HasConvTiles) unless the GEMM
// configuration forces a narrower kernel (COHORT_GEMM_KERNEL=avx2 or go
// turns them off with the AVX-512 GEMM kernel, so that one setting runs
// the whole AVX2 or Go path). It is decided at the first convolution, when
// the GEMM reads its configuration; tests replace it to cover both paths.
var useConvTiles = sync.OnceValue(func() bool {
	if !vec.HasConvTiles() {
		return false
	}
	g, err := gemm.Default()
	if err != nil {
		return true // the GEMM call reports the configuration error
	}
	k := g.Kernel()
	return k != gemm.KernelAVX2 && k != gemm.KernelGo
})

// directConvForward is wideConvForward through the direct tiles.
func directConvForward(wg *wideGeom, xd []float32, w2 *Tensor, ep *convEpilogue) {
	g := wg.ConvGeom
	O, K := w2.shape[0], w2.shape[1]
	wd := w2.Data()
	// Weights packed by tap, six channels at a time.
	blocks := (O + 5) / 6
	packed := scratch(blocks * 6 * K)
	defer freeScratch(packed)
	for b := 0; b < blocks; b++ {
		for r := 0; r < min(6, O-6*b); r++ {
			row := wd[(6*b+r)*K:][:K]
			for k, v := range row {
				packed[(b*K+k)*6+r] = v
			}
		}
	}
	// About 128 KiB of output per chunk.
	nb := max(1, min(g.N, (128<<10)/4/max(O*wg.pos, 1)))
	out := scratch(O * nb * wg.pos)
	var xp []float32
	if wg.padded {
		xp = scratch(nb * wg.plane)
	}
	defer func() { freeScratch(out, xp) }()
	for n0 := 0; n0 < g.N; n0 += nb {
		m := min(nb, g.N-n0)
		l := wg.layout(m)
		src := wg.samplesOf(xp, xd, n0, m)
		for n := 0; n < m; n++ {
			xs := src[n*wg.plane:][:wg.plane]
			for p0 := 0; p0 < wg.pos; p0 += 64 {
				cols := min(64, wg.pos-p0)
				for b := 0; b < blocks; b++ {
					vec.ConvTile6x64(out[6*b*l.cols+n*wg.pos+p0:], l.cols, min(6, O-6*b), cols,
						packed[b*6*K:][:6*K], wg.offs, xs[p0:])
				}
			}
		}
		ep.emit(out, l, g, O, n0, m)
	}
}

// directWeightGrad accumulates a weight gradient [O, K] over chunks as
// lane-wise partial sums, one 4-tap × 6-channel block of vec.Dot4x6 at a
// time; finish adds them up into the gradient.
type directWeightGrad struct {
	wg     *wideGeom
	O, K   int
	tb, ob int       // tap and channel blocks
	acc    []float32 // [tb][ob][24][16]
	aRows  [4][]float32
	bRows  [6][]float32
}

func newDirectWeightGrad(wg *wideGeom, O int) *directWeightGrad {
	K := len(wg.offs)
	d := &directWeightGrad{wg: wg, O: O, K: K, tb: (K + 3) / 4, ob: (O + 5) / 6}
	d.acc = scratch(d.tb * d.ob * 24 * 16)
	return d
}

// add accumulates the products of the chunk's output gradient dyw
// (layout l, m samples) with its padded input src.
func (d *directWeightGrad) add(src, dyw []float32, l chunkLayout, m int) {
	P := d.wg.pos
	for tb := 0; tb < d.tb; tb++ {
		for i := range d.aRows {
			// Blocks past the last tap repeat it; finish skips them.
			k := min(4*tb+i, d.K-1)
			d.aRows[i] = src[d.wg.offs[k]:]
		}
		for ob := 0; ob < d.ob; ob++ {
			for j := range d.bRows {
				o := min(6*ob+j, d.O-1)
				d.bRows[j] = dyw[o*l.cols:]
			}
			vec.Dot4x6(d.acc[(tb*d.ob+ob)*24*16:], P, m, d.aRows, d.wg.plane, d.bRows, l.span)
		}
	}
}

// finish adds the accumulated products into dw [O, K] and hands the
// partial sums' storage back.
func (d *directWeightGrad) finish(dw []float32) {
	defer freeScratch(d.acc)
	for tb := 0; tb < d.tb; tb++ {
		for ob := 0; ob < d.ob; ob++ {
			blk := d.acc[(tb*d.ob+ob)*24*16:]
			for i := 0; i < 4 && 4*tb+i < d.K; i++ {
				for j := 0; j < 6 && 6*ob+j < d.O; j++ {
					dw[(6*ob+j)*d.K+4*tb+i] += vec.Sum16(blk[(6*i+j)*16:])
				}
			}
		}
	}
}
