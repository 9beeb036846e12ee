package tensor

import (
	"math"
	"slices"

	"github.com/cohortml/cohort/tensor/internal/gemm"
	"github.com/cohortml/cohort/tensor/internal/vec"
)

// 2-D convolution as GEMM over unfolded input windows. The input is
// unfolded (im2col) into a [C·KH·KW, positions] matrix ("col") a chunk of
// samples at a time, so the output is weight[O, C·KH·KW] @ col; the
// backward pass multiplies the output gradient by colᵀ for the weight
// gradient and folds weightᵀ @ dy back onto the input (col2im) for the
// input gradient. Stride-1 convolutions use the wide unfolding of
// conv_wide.go, whose rows are contiguous slices of the (padded) input;
// other strides the general unfolding of conv_im2col.go.

// ConvGeom is the geometry of a 2-D convolution or pooling window over an
// N×C×H×W input: kernel KH×KW, equal stride and zero padding on both axes,
// output OH×OW.
type ConvGeom struct {
	N, C, H, W      int
	KH, KW          int
	Stride, Padding int
	OH, OW          int
}

// NewConvGeom validates a window over input shape x ([N, C, H, W]) and
// computes the output size; op names the caller in panics.
func NewConvGeom(op string, x []int, kh, kw, stride, padding int) ConvGeom {
	if len(x) != 4 {
		panicf("%s: input shape %v, want [N, C, H, W]", op, x)
	}
	if kh <= 0 || kw <= 0 || stride <= 0 || padding < 0 {
		panicf("%s: kernel %dx%d, stride %d, padding %d: want kernel and stride > 0, padding ≥ 0", op, kh, kw, stride, padding)
	}
	g := ConvGeom{N: x[0], C: x[1], H: x[2], W: x[3], KH: kh, KW: kw, Stride: stride, Padding: padding}
	hp, wp := g.H+2*padding, g.W+2*padding
	if hp < kh || wp < kw {
		panicf("%s: kernel %dx%d larger than padded input %dx%d (input shape %v, padding %d)", op, kh, kw, hp, wp, x, padding)
	}
	g.OH = (hp-kh)/stride + 1
	g.OW = (wp-kw)/stride + 1
	return g
}

// outRange returns the output positions [lo, hi) whose input coordinate
// o·stride − padding + k falls inside [0, size).
func outRange(k, stride, padding, size, out int) (int, int) {
	// o·s ≥ p − k  and  o·s ≤ size − 1 + p − k
	lo := 0
	if d := padding - k; d > 0 {
		lo = (d + stride - 1) / stride
	}
	hi := out
	if d := size - 1 + padding - k; d < 0 {
		hi = 0
	} else if h := d/stride + 1; h < hi {
		hi = h
	}
	if lo > hi {
		lo = hi
	}
	return lo, hi
}

// Im2Col unfolds x [N, C, H, W] into a new [C·KH·KW, N·OH·OW] matrix: row
// (c, i, j) holds input pixel (c, oh·s−p+i, ow·s−p+j) of every output
// position (n, oh, ow), zero where that falls in the padding.
func Im2Col(x *Tensor, g ConvGeom) *Tensor {
	col := New(g.C*g.KH*g.KW, g.N*g.OH*g.OW)
	im2colInto(col.Data(), x.Contiguous().Data(), g, 0, g.N)
	return col
}

// Col2ImAdd folds col [C·KH·KW, N·OH·OW] back onto dx [N, C, H, W] (which
// must be contiguous), adding every entry to the input pixel it was read
// from: the adjoint of Im2Col.
func Col2ImAdd(dx, col *Tensor, g ConvGeom) {
	col2imAdd(dx.Data(), col.Contiguous().Data(), g, 0, g.N)
}

func convCheck(op string, x, w, b *Tensor, stride, padding int) ConvGeom {
	if len(w.shape) != 4 {
		panicf("%s: weight shape %v, want [O, C, KH, KW]", op, w.shape)
	}
	g := NewConvGeom(op, x.shape, w.shape[2], w.shape[3], stride, padding)
	if w.shape[1] != g.C {
		panicf("%s: input shape %v has %d channels, weight shape %v expects %d", op, x.shape, g.C, w.shape, w.shape[1])
	}
	if b != nil && (len(b.shape) != 1 || b.shape[0] != w.shape[0]) {
		panicf("%s: bias shape %v, want [%d] for weight shape %v", op, b.shape, w.shape[0], w.shape)
	}
	return g
}

// Conv2d returns the 2-D cross-correlation of x [N, C, H, W] with weight
// [O, C, KH, KW] plus bias [O] (nil for none): [N, O, OH, OW], with equal
// stride and zero padding on both axes (PyTorch's conv2d).
//
// The product runs a chunk of samples at a time (see the package
// documentation for the paths), so no full-batch unfolded copy is ever
// built; the bias is added as the product is copied out.
func Conv2d(x, w, b *Tensor, stride, padding int) *Tensor {
	return Conv2dAs(Float32, x, w, b, stride, padding)
}

// Conv2dAs is Conv2d with its products in dt (see GemmAs): for BFloat16
// the unfolded input and the weight are rounded as the products pack
// them, the rest in float32. Float32 is Conv2d. The same holds for the
// other ...As convolution ops below. Host tensors only for BFloat16.
func Conv2dAs(dt DType, x, w, b *Tensor, stride, padding int) *Tensor {
	return conv2dAct("Conv2d", Identity, dt, x, w, b, stride, padding)
}

// Conv2dReLU returns max(Conv2d(x, w, b, stride, padding), 0), computed in
// the same pass as the convolution (no intermediate tensor). Its gradients
// come from Conv2dReLUBackward.
func Conv2dReLU(x, w, b *Tensor, stride, padding int) *Tensor {
	return Conv2dReLUAs(Float32, x, w, b, stride, padding)
}

// Conv2dReLUAs is Conv2dReLU with its products in dt (see Conv2dAs).
func Conv2dReLUAs(dt DType, x, w, b *Tensor, stride, padding int) *Tensor {
	return conv2dAct("Conv2dReLU", ReLUAct, dt, x, w, b, stride, padding)
}

// conv2dAct is Conv2dAs (act Identity) and Conv2dReLUAs (act ReLUAct),
// named op in panics.
func conv2dAct(op string, act Activation, dt DType, x, w, b *Tensor, stride, padding int) *Tensor {
	if x.buf != nil || w.buf != nil || b != nil && b.buf != nil {
		return deviceConv(op, x, w, b, stride, padding, act)
	}
	g, y := convStart(op, x, w, b, stride, padding, 1)
	convForward(dt, x, w, g, &convEpilogue{bias: convBias(b), y: y.Data(), relu: act == ReLUAct})
	return y
}

// Conv2dReLUMaxPool2d returns MaxPool2d(Conv2dReLU(x, w, b, stride,
// padding), pool, pool, 0), the convolution block of LeNet- and VGG-style
// networks, in one pass: the convolution's output is pooled while it is
// still in cache and never stored. The result is [N, O, OH/pool, OW/pool]
// (floor) and, for each of its elements, the index (oh·OW + ow) within its
// convolution output plane of the element chosen, as MaxPool2d's. Pass
// both to Conv2dReLUMaxPool2dBackward.
//
// The values equal the unfused ops' exactly; so do the gradients, up to
// the order of the bias gradient's sum.
func Conv2dReLUMaxPool2d(x, w, b *Tensor, stride, padding, pool int) (*Tensor, []int32) {
	return Conv2dReLUMaxPool2dAs(Float32, x, w, b, stride, padding, pool)
}

// Conv2dReLUMaxPool2dAs is Conv2dReLUMaxPool2d with its products in dt
// (see Conv2dAs).
func Conv2dReLUMaxPool2dAs(dt DType, x, w, b *Tensor, stride, padding, pool int) (*Tensor, []int32) {
	if x.buf != nil || w.buf != nil || b != nil && b.buf != nil {
		unsupported("Conv2dReLUMaxPool2d", x.Device())
	}
	g, y := convStart("Conv2dReLUMaxPool2d", x, w, b, stride, padding, pool)
	arg := make([]int32, y.Len())
	convForward(dt, x, w, g, &convEpilogue{bias: convBias(b), y: y.Data(), relu: true, pool: pool, arg: arg})
	return y, arg
}

// convStart checks the operands of a forward op and allocates its output,
// the convolution's output pooled by pool×pool windows (1: not pooled).
func convStart(op string, x, w, b *Tensor, stride, padding, pool int) (ConvGeom, *Tensor) {
	g := convCheck(op, x, w, b, stride, padding)
	checkPool(op, g, pool)
	return g, New(g.N, w.shape[0], g.OH/pool, g.OW/pool)
}

// checkPool panics unless pool×pool windows fit the convolution's output.
func checkPool(op string, g ConvGeom, pool int) {
	if pool < 1 || pool > g.OH || pool > g.OW {
		panicf("%s: pool %d for a %dx%d convolution output (input shape %v, kernel %dx%d): want 1 ≤ pool ≤ output size", op, pool, g.OH, g.OW, []int{g.N, g.C, g.H, g.W}, g.KH, g.KW)
	}
}

func convBias(b *Tensor) []float32 {
	if b == nil {
		return nil
	}
	return b.Contiguous().Data()
}

// convForward runs the convolution of x by w through the path for its
// stride, handing each chunk's product to ep.
// Products in bfloat16 at stride 1 run the float32 direct path on
// operands rounded to bfloat16 (roundedConvOperands); at other strides
// they take the unfolding (im2col), whose GEMMs round their operands as
// they pack them.
func convForward(dt DType, x, w *Tensor, g ConvGeom, ep *convEpilogue) {
	if len(ep.y) == 0 {
		return
	}
	checkAutocastDType("Conv2dAs", dt)
	xd := x.Contiguous().Data()
	w2 := w.Contiguous().Reshape(w.shape[0], g.C*g.KH*g.KW)
	if g.Stride == 1 {
		if dt == BFloat16 {
			r := roundedConvOperands(xd, w2.Data())
			defer r.free()
			xd, w2 = r.ops[0], FromSlice(r.ops[1], w2.shape...)
		}
		wideConvForward(xd, w2, g, ep)
	} else {
		im2colConvForward(dt, xd, w2, g, ep)
	}
}

// Conv2dBackward returns the gradients of Conv2d given the output
// gradient dy [N, O, OH, OW], the input x and the weight w: dx (nil unless
// needInput), dw shaped like w, and db [O]. The unfolded input is
// recomputed chunk by chunk rather than kept from the forward pass.
func Conv2dBackward(dy, x, w *Tensor, stride, padding int, needInput bool) (dx, dw, db *Tensor) {
	return Conv2dBackwardAs(Float32, dy, x, w, stride, padding, needInput)
}

// Conv2dBackwardAs is Conv2dBackward with its products in dt (see
// Conv2dAs).
func Conv2dBackwardAs(dt DType, dy, x, w *Tensor, stride, padding int, needInput bool) (dx, dw, db *Tensor) {
	g := convCheck("Conv2dBackward", x, w, nil, stride, padding)
	checkGradShape("Conv2dBackward", dy, g, w, 1)
	if dy.buf != nil || x.buf != nil || w.buf != nil {
		return deviceConvBackward("Conv2dBackward", dy, nil, x, w, stride, padding, needInput, Identity)
	}
	return convBackward(dt, &convPrologue{dy: dy.Contiguous().Data()}, x, w, g, needInput)
}

// Conv2dReLUBackward returns the gradients of Conv2dReLU given the output
// gradient dy, the output y = Conv2dReLU(x, w, b, stride, padding), the
// input x and the weight w, as Conv2dBackward: dy flows back only where y
// is positive (ReLU's gradient is 0 at 0, as PyTorch's).
func Conv2dReLUBackward(dy, y, x, w *Tensor, stride, padding int, needInput bool) (dx, dw, db *Tensor) {
	return Conv2dReLUBackwardAs(Float32, dy, y, x, w, stride, padding, needInput)
}

// Conv2dReLUBackwardAs is Conv2dReLUBackward with its products in dt (see
// Conv2dAs).
func Conv2dReLUBackwardAs(dt DType, dy, y, x, w *Tensor, stride, padding int, needInput bool) (dx, dw, db *Tensor) {
	g := convCheck("Conv2dReLUBackward", x, w, nil, stride, padding)
	checkGradShape("Conv2dReLUBackward", dy, g, w, 1)
	if !slices.Equal(y.shape, dy.shape) {
		panicf("Conv2dReLUBackward: output shape %v, output gradient shape %v: want equal", y.shape, dy.shape)
	}
	if dy.buf != nil || y.buf != nil || x.buf != nil || w.buf != nil {
		return deviceConvBackward("Conv2dReLUBackward", dy, y, x, w, stride, padding, needInput, ReLUAct)
	}
	pr := &convPrologue{dy: dy.Contiguous().Data(), y: y.Contiguous().Data()}
	return convBackward(dt, pr, x, w, g, needInput)
}

// Conv2dReLUMaxPool2dBackward returns the gradients of
// Conv2dReLUMaxPool2d given the gradient dy of its output y, y itself and
// the indices argmax it returned, the input x and the weight w, as
// Conv2dBackward.
func Conv2dReLUMaxPool2dBackward(dy, y *Tensor, argmax []int32, x, w *Tensor, stride, padding, pool int, needInput bool) (dx, dw, db *Tensor) {
	return Conv2dReLUMaxPool2dBackwardAs(Float32, dy, y, argmax, x, w, stride, padding, pool, needInput)
}

// Conv2dReLUMaxPool2dBackwardAs is Conv2dReLUMaxPool2dBackward with its
// products in dt (see Conv2dAs).
func Conv2dReLUMaxPool2dBackwardAs(dt DType, dy, y *Tensor, argmax []int32, x, w *Tensor, stride, padding, pool int, needInput bool) (dx, dw, db *Tensor) {
	const op = "Conv2dReLUMaxPool2dBackward"
	if dy.buf != nil || x.buf != nil || w.buf != nil {
		unsupported(op, dy.Device())
	}
	g := convCheck(op, x, w, nil, stride, padding)
	checkPool(op, g, pool)
	checkGradShape(op, dy, g, w, pool)
	if !slices.Equal(y.shape, dy.shape) || len(argmax) != y.Len() {
		panicf("%s: output shape %v with %d indices, output gradient shape %v: want equal shapes and one index per element", op, y.shape, len(argmax), dy.shape)
	}
	pr := &convPrologue{dy: dy.Contiguous().Data(), y: y.Contiguous().Data(), pool: pool, arg: argmax}
	return convBackward(dt, pr, x, w, g, needInput)
}

func checkGradShape(op string, dy *Tensor, g ConvGeom, w *Tensor, pool int) {
	if want := []int{g.N, w.shape[0], g.OH / pool, g.OW / pool}; !slices.Equal(dy.shape, want) {
		panicf("%s: output gradient shape %v, want %v", op, dy.shape, want)
	}
}

// convBackward computes the gradients of a convolution whose output
// gradient pr supplies, through the path for its stride.
func convBackward(dt DType, pr *convPrologue, x, w *Tensor, g ConvGeom, needInput bool) (dx, dw, db *Tensor) {
	checkAutocastDType("Conv2dBackwardAs", dt)
	O, K := w.shape[0], g.C*g.KH*g.KW
	dw, db = New(w.shape...), New(O)
	if needInput {
		dx = New(x.shape...)
	}
	if len(pr.dy) == 0 {
		return dx, dw, db
	}
	a := convGrads{
		xd: x.Contiguous().Data(),
		w2: w.Contiguous().Reshape(O, K),
		dw: dw.Reshape(O, K),
		db: db.Data(),
	}
	if dx != nil {
		a.dx = dx.Data()
	}
	if g.Stride == 1 {
		if dt == BFloat16 {
			r := roundedConvOperands(a.xd, a.w2.Data())
			defer r.free()
			rp := *pr
			rp.round = true // the gathered output gradient, after the bias sums
			a.xd, a.w2, pr = r.ops[0], FromSlice(r.ops[1], a.w2.shape...), &rp
		}
		wideConvBackward(pr, a, g)
	} else {
		im2colConvBackward(dt, pr, a, g)
	}
	return dx, dw, db
}

// convGrads holds the operands of a convolution's backward pass other
// than the output gradient.
type convGrads struct {
	xd []float32 // input [N, C, H, W]
	w2 *Tensor   // weight [O, C·KH·KW]
	dw *Tensor   // weight gradient [O, C·KH·KW], accumulated into
	db []float32 // bias gradient [O], accumulated into
	dx []float32 // input gradient [N, C, H, W], accumulated into; nil when not needed
}

// A chunk of m samples' convolution outputs lives in an [O, cols] matrix
// (the GEMM's product in the forward pass, the output gradient in the
// backward pass) whose column for output (n, oh, ow) of the chunk is
// n·span + oh·rowStride + ow. Columns outside that map (the wide path's
// wrap-around columns) are ignored by the forward pass and must be zero in
// the backward pass.
type chunkLayout struct {
	cols, span, rowStride int
}

// convEpilogue turns a chunk's product into the op's output: bias added,
// through a ReLU when relu is set, and pooled by pool×pool windows with
// the chosen indices in arg when arg is not nil (the ReLU then implied).
type convEpilogue struct {
	bias []float32 // [O]; nil for none
	y    []float32 // the op's output
	relu bool
	pool int
	arg  []int32
}

// biasOf returns channel o's bias (0 without one).
func (ep *convEpilogue) biasOf(o int) float32 {
	if ep.bias == nil {
		return 0
	}
	return ep.bias[o]
}

// emit writes the outputs of samples [n0, n0+m) from out ([O, l.cols]).
func (ep *convEpilogue) emit(out []float32, l chunkLayout, g ConvGeom, O, n0, m int) {
	if ep.arg != nil {
		ep.emitPooled(out, l, g, O, n0, m)
		return
	}
	L := g.OH * g.OW
	for o := 0; o < O; o++ {
		bias := ep.biasOf(o)
		for n := 0; n < m; n++ {
			src := out[o*l.cols+n*l.span:]
			dst := ep.y[((n0+n)*O+o)*L:][:L]
			if l.rowStride == g.OW {
				biasRow(dst, src, bias, ep.relu)
				continue
			}
			for oh := 0; oh < g.OH; oh++ {
				biasRow(dst[oh*g.OW:][:g.OW], src[oh*l.rowStride:], bias, ep.relu)
			}
		}
	}
}

// emitPooled is emit for a pooled output: each window's first maximum (or
// NaN) of the biased product, then the ReLU, which commutes with the
// maximum (a window whose maximum is not positive gets no gradient, so
// which of its elements is recorded does not matter).
func (ep *convEpilogue) emitPooled(out []float32, l chunkLayout, g ConvGeom, O, n0, m int) {
	k := ep.pool
	PH, PW := g.OH/k, g.OW/k
	PL := PH * PW
	for o := 0; o < O; o++ {
		bias := ep.biasOf(o)
		for n := 0; n < m; n++ {
			src := out[o*l.cols+n*l.span:]
			i0 := ((n0+n)*O + o) * PL
			dst := ep.y[i0:][:PL]
			arg := ep.arg[i0:][:PL]
			if k == 2 {
				vec.MaxPool2Plane(dst, arg, src, PH, PW, l.rowStride, bias, true, true, g.OW)
				continue
			}
			for ph := 0; ph < PH; ph++ {
				for pw := 0; pw < PW; pw++ {
					best, bi := src[ph*k*l.rowStride+pw*k]+bias, ph*k*g.OW+pw*k
					for i := 0; i < k; i++ {
						row := src[(ph*k+i)*l.rowStride:]
						for j := 0; j < k; j++ {
							best, bi = vec.PickMax(best, bi, row[pw*k+j]+bias, (ph*k+i)*g.OW+pw*k+j)
						}
					}
					dst[ph*PW+pw], arg[ph*PW+pw] = max(best, 0), int32(bi)
				}
			}
		}
	}
}

// convPrologue supplies a chunk's output gradient to the backward pass:
// dy as it is; masked by a fused ReLU's output y; or, when arg is not nil,
// the gradient of the pool×pool-pooled output y routed back to the
// indices arg, where y is positive.
type convPrologue struct {
	dy    []float32
	y     []float32
	pool  int
	arg   []int32
	round bool // round the gathered gradient to bfloat16 (its sums into db stay float32)
}

// gather writes the output gradient of samples [n0, n0+m) into dyw
// ([O, l.cols], every column written) and adds its sums into db.
func (pr *convPrologue) gather(dyw []float32, l chunkLayout, g ConvGeom, db []float32, n0, m int) {
	O := len(db)
	if pr.round {
		defer roundInPlace(dyw[:O*l.cols])
	}
	if pr.arg != nil {
		clear(dyw[:O*l.cols])
		PH, PW := g.OH/pr.pool, g.OW/pr.pool
		PL := PH * PW
		for n := 0; n < m; n++ {
			for o := 0; o < O; o++ {
				i0 := ((n0+n)*O + o) * PL
				gd, yd, arg := pr.dy[i0:][:PL], pr.y[i0:][:PL], pr.arg[i0:][:PL]
				dst := dyw[o*l.cols+n*l.span:][:l.span]
				if pr.pool == 2 {
					db[o] += unpool2x2(dst, gd, yd, arg, PH, PW, l.rowStride, g.OW)
					continue
				}
				var acc float64
				for i, a := range arg {
					// The ReLU's gradient is 0 where y is 0 (see
					// reluMaskRow).
					m := uint32(int32(-math.Float32bits(yd[i])) >> 31)
					v := math.Float32frombits(math.Float32bits(gd[i]) & m)
					dst[int(a)/g.OW*l.rowStride+int(a)%g.OW] = v
					acc += float64(v)
				}
				db[o] += float32(acc)
			}
		}
		return
	}
	L := g.OH * g.OW
	for n := 0; n < m; n++ {
		for o := 0; o < O; o++ {
			i := ((n0+n)*O + o) * L
			src := pr.dy[i:][:L]
			row := dyw[o*l.cols+n*l.span:][:l.span]
			for oh := 0; oh < g.OH; oh++ {
				dst := row[oh*l.rowStride:][:g.OW]
				if pr.y != nil {
					reluMaskRow(dst, src[oh*g.OW:], pr.y[i+oh*g.OW:])
				} else {
					copy(dst, src[oh*g.OW:])
				}
				if oh < g.OH-1 {
					clear(row[oh*l.rowStride+g.OW : (oh+1)*l.rowStride])
				}
			}
			db[o] += sum64(row)
		}
	}
}

// reluMaskRow writes g where the ReLU output y is positive (or NaN) and 0
// where it is 0 (see vec.ReLUMask).
func reluMaskRow(dst, g, y []float32) { vec.ReLUMask(dst, g, y) }

// biasRow writes src + bias into dst, through a ReLU when relu is set.
func biasRow(dst, src []float32, bias float32, relu bool) { vec.Bias(dst, src, bias, relu) }

// unpool2x2 writes the gradient g of a ReLU-then-2×2-max-pooled output y
// ([PH, PW]) to the elements arg chose in dst, whose rows are rowStride
// apart while arg counts rows of width w, and returns the sum of what it
// wrote. It finds each element's row and column from its offset in its
// window (0, 1, w or w+1) rather than by dividing by w.
func unpool2x2(dst, g, y []float32, arg []int32, PH, PW, rowStride, w int) float32 {
	// Two sums in registers, so that the additions do not wait on each
	// other.
	var acc0, acc1 float64
	for ph := 0; ph < PH; ph++ {
		gr, yr, ar := g[ph*PW:][:PW], y[ph*PW:][:PW], arg[ph*PW:][:PW]
		row := dst[2*ph*rowStride:]
		base := 2 * ph * w
		pw := 0
		for ; pw+1 < PW; pw += 2 {
			v0 := maskedGrad(gr[pw], yr[pw])
			v1 := maskedGrad(gr[pw+1], yr[pw+1])
			row[unpoolIndex(int(ar[pw])-base-2*pw, w, rowStride)+2*pw] = v0
			row[unpoolIndex(int(ar[pw+1])-base-2*pw-2, w, rowStride)+2*pw+2] = v1
			acc0 += float64(v0)
			acc1 += float64(v1)
		}
		if pw < PW {
			v := maskedGrad(gr[pw], yr[pw])
			row[unpoolIndex(int(ar[pw])-base-2*pw, w, rowStride)+2*pw] = v
			acc0 += float64(v)
		}
	}
	return float32(acc0 + acc1)
}

// maskedGrad is g where the ReLU output y is non-zero, else 0 (see
// reluMaskRow), without branching.
func maskedGrad(g, y float32) float32 {
	b := math.Float32bits(y) &^ (1 << 31)
	m := uint32(int32(-b) >> 31)
	return math.Float32frombits(math.Float32bits(g) & m)
}

// unpoolIndex maps an element's offset in its 2×2 window (0, 1, w or w+1
// in a plane of row width w) to its offset in rows rowStride apart.
func unpoolIndex(off, w, rowStride int) int { return off + vec.B2I(off >= w)*(rowStride-w) }

// sum64 returns the sum of v accumulated in float64, rounded to float32.
func sum64(v []float32) float32 {
	var acc float64
	for _, x := range v {
		acc += float64(x)
	}
	return float32(acc)
}

// deviceConv is Conv2d (act Identity) or Conv2dReLU on a device.
func deviceConv(op string, x, w, b *Tensor, stride, padding int, act Activation) *Tensor {
	g := convCheck(op, x, w, b, stride, padding)
	dev, be := deviceOf(op, x, w, b)
	y := NewOn(dev, g.N, w.shape[0], g.OH, g.OW)
	if y.Len() > 0 {
		be.Conv2d(y, x, w, b, stride, padding, act)
	}
	return y
}

// deviceConvBackward is Conv2dBackward or Conv2dReLUBackward on a device.
func deviceConvBackward(op string, dy, y, x, w *Tensor, stride, padding int, needInput bool, act Activation) (dx, dw, db *Tensor) {
	dev, be := deviceOf(op, dy, y, x, w)
	if needInput {
		dx = NewOn(dev, x.shape...)
	}
	dw, db = NewOn(dev, w.shape...), NewOn(dev, w.shape[0])
	be.Conv2dBackward(dx, dw, db, dy, y, x, w, stride, padding, act)
	return dx, dw, db
}

// roundedOperands are float32 copies of a convolution's operands rounded
// to bfloat16 (round to nearest even), in recycled scratch.
//
// Why a bfloat16 convolution at stride 1 runs the float32 direct path on
// them rather than the bfloat16 GEMM: the product of two bfloat16 values
// (8-bit significands) is exact in float32 (24 bits), so float32 tiles
// fed rounded operands compute what a bfloat16 product with float32
// accumulation does, within the same bound (only the order of the sums
// differs); and the bfloat16 GEMM needs the input unfolded (im2col),
// which for the short products of small convolutions (LeNet: K = 25 and
// 150) costs more than its faster multiply gains: LeNet trained at 0.40×
// float32's speed through it, pinned to one Zen 5 core. Rounding costs one
// pass over the input, the weight and the output gradient (rounded as
// it is gathered, after its float32 sums into the bias gradient).
type roundedOperands struct{ ops [][]float32 }

func roundedConvOperands(srcs ...[]float32) roundedOperands {
	r := roundedOperands{ops: make([][]float32, len(srcs))}
	for i, src := range srcs {
		dst := scratch(len(src))
		parallelRanges(len(src), 1<<14, 64, func(lo, hi int) { roundInto(dst[lo:hi], src[lo:hi]) })
		r.ops[i] = dst
	}
	return r
}

// roundInto writes src rounded to bfloat16 (round to nearest even) into
// dst as float32 values.
func roundInto(dst, src []float32) {
	var buf [256]uint16
	for lo := 0; lo < len(src); lo += len(buf) {
		n := min(len(buf), len(src)-lo)
		gemm.ToBF16(buf[:n], src[lo:lo+n])
		gemm.FromBF16(dst[lo:lo+n], buf[:n])
	}
}

func roundInPlace(s []float32) { roundInto(s, s) }

func (r roundedOperands) free() { freeScratch(r.ops...) }
