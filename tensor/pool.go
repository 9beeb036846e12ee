package tensor

import (
	"slices"

	"github.com/cohortml/cohort/tensor/internal/vec"
)

// 2-D pooling over [N, C, H, W] inputs with a square kernel, equal stride
// and zero padding on both axes (floor mode, as PyTorch's defaults).

// MaxPool2d returns the window maxima of x, [N, C, OH, OW], and for each
// output element the index (h·W + w) within its input plane of the element
// chosen (the first maximum in row-major window order). Padding counts as
// −∞. Pass the indices to MaxPool2dBackward.
//
// On a device the indices are not made (nil is returned): the backward
// pass there is MaxPool2dBackwardFromInput, which finds the maxima again
// from the input, as cuDNN does.
func MaxPool2d(x *Tensor, kernel, stride, padding int) (*Tensor, []int32) {
	g := NewConvGeom("MaxPool2d", x.shape, kernel, kernel, stride, padding)
	if padding > kernel/2 {
		panicf("MaxPool2d: padding %d exceeds half the kernel %d", padding, kernel)
	}
	if x.buf != nil {
		dev, be := deviceOf("MaxPool2d", x)
		y := NewOn(dev, g.N, g.C, g.OH, g.OW)
		if y.Len() > 0 {
			be.MaxPool2d(y, x, kernel, stride, padding)
		}
		return y, nil
	}
	xd := x.Contiguous().Data()
	y := New(g.N, g.C, g.OH, g.OW)
	yd := y.Data()
	arg := make([]int32, len(yd))
	HW, L := g.H*g.W, g.OH*g.OW
	if kernel == 2 && stride == 2 && padding == 0 {
		maxPool2x2(xd, yd, arg, g)
		return y, arg
	}
	for pl := 0; pl < g.N*g.C; pl++ {
		in := xd[pl*HW:][:HW]
		out := yd[pl*L:][:L]
		am := arg[pl*L:][:L]
		for oh := 0; oh < g.OH; oh++ {
			h0 := oh*stride - padding
			hLo, hHi := max(h0, 0), min(h0+kernel, g.H)
			for ow := 0; ow < g.OW; ow++ {
				w0 := ow*stride - padding
				wLo, wHi := max(w0, 0), min(w0+kernel, g.W)
				first := hLo*g.W + wLo
				best, bi := in[first], first
				for i := hLo; i < hHi; i++ {
					row := in[i*g.W : i*g.W+wHi]
					for j := wLo; j < wHi; j++ {
						best, bi = vec.PickMax(best, bi, row[j], i*g.W+j)
					}
				}
				out[oh*g.OW+ow], am[oh*g.OW+ow] = best, int32(bi)
			}
		}
	}
	return y, arg
}

// maxPool2x2 is MaxPool2d's loop for the common 2×2 window, stride 2.
func maxPool2x2(xd, yd []float32, arg []int32, g ConvGeom) {
	HW, L := g.H*g.W, g.OH*g.OW
	for pl := 0; pl < g.N*g.C; pl++ {
		vec.MaxPool2Plane(yd[pl*L:][:L], arg[pl*L:][:L], xd[pl*HW:][:HW], g.OH, g.OW, g.W, 0, false, false, g.W)
	}
}

// MaxPool2dBackward routes dy [N, C, OH, OW] to the input positions
// MaxPool2d chose, returning dx of shape xShape.
func MaxPool2dBackward(dy *Tensor, argmax []int32, xShape []int) *Tensor {
	if dy.buf != nil {
		unsupported("MaxPool2dBackward", dy.Device())
	}
	if len(xShape) != 4 || len(dy.shape) != 4 || dy.shape[0] != xShape[0] || dy.shape[1] != xShape[1] || len(argmax) != dy.Len() {
		panicf("MaxPool2dBackward: gradient shape %v with %d indices does not match input shape %v", dy.shape, len(argmax), xShape)
	}
	dx := New(xShape...)
	dxd := dx.Data()
	dyd := dy.Contiguous().Data()
	HW := xShape[2] * xShape[3]
	L := dy.shape[2] * dy.shape[3]
	for pl := 0; pl < xShape[0]*xShape[1]; pl++ {
		in := dxd[pl*HW:][:HW]
		g := dyd[pl*L:][:L]
		for i, a := range argmax[pl*L : (pl+1)*L] {
			in[a] += g[i]
		}
	}
	return dx
}

// MaxPool2dBackwardFromInput is MaxPool2dBackward for MaxPool2d(x,
// kernel, stride, padding) that finds each window's chosen element again
// from x instead of taking saved indices: the form that works on every
// device (on the CPU it runs MaxPool2d again for the indices).
func MaxPool2dBackwardFromInput(dy, x *Tensor, kernel, stride, padding int) *Tensor {
	g := NewConvGeom("MaxPool2dBackward", x.shape, kernel, kernel, stride, padding)
	if want := []int{g.N, g.C, g.OH, g.OW}; !slices.Equal(dy.shape, want) {
		panicf("MaxPool2dBackward: gradient shape %v, want %v for input shape %v", dy.shape, want, x.shape)
	}
	if dy.buf == nil && x.buf == nil {
		_, arg := MaxPool2d(x, kernel, stride, padding)
		return MaxPool2dBackward(dy, arg, x.shape)
	}
	dev, be := deviceOf("MaxPool2dBackward", dy, x)
	dx := NewOn(dev, x.shape...)
	if dy.Len() > 0 {
		be.MaxPool2dBackward(dx, dy, x, kernel, stride, padding)
	}
	return dx
}

// AvgPool2d returns the window means of x, [N, C, OH, OW]. Padding counts
// as zeros in the mean (PyTorch's count_include_pad).
func AvgPool2d(x *Tensor, kernel, stride, padding int) *Tensor {
	g := NewConvGeom("AvgPool2d", x.shape, kernel, kernel, stride, padding)
	if x.buf != nil {
		dev, be := deviceOf("AvgPool2d", x)
		y := NewOn(dev, g.N, g.C, g.OH, g.OW)
		if y.Len() > 0 {
			be.AvgPool2d(y, x, kernel, stride, padding)
		}
		return y
	}
	y := New(g.N, g.C, g.OH, g.OW)
	avgPoolPlanes(g, kernel, stride, padding, x.Contiguous().Data(), y.Data(), false)
	return y
}

// avgPoolPlanes runs average pooling over every plane of xd ([N·C][H·W])
// and yd ([N·C][OH·OW]): forward, each window's mean of xd into yd, or
// backward, each element of yd spread evenly over its window of xd.
func avgPoolPlanes(g ConvGeom, kernel, stride, padding int, xd, yd []float32, backward bool) {
	inv := 1 / float32(kernel*kernel)
	HW, L := g.H*g.W, g.OH*g.OW
	for pl := 0; pl < g.N*g.C; pl++ {
		in := xd[pl*HW:][:HW]
		out := yd[pl*L:][:L]
		for oh := 0; oh < g.OH; oh++ {
			h0 := oh*stride - padding
			for ow := 0; ow < g.OW; ow++ {
				w0 := ow*stride - padding
				if backward {
					v := out[oh*g.OW+ow] * inv
					for i := max(h0, 0); i < min(h0+kernel, g.H); i++ {
						row := in[i*g.W+max(w0, 0) : i*g.W+min(w0+kernel, g.W)]
						for j := range row {
							row[j] += v
						}
					}
					continue
				}
				var acc float32
				for i := max(h0, 0); i < min(h0+kernel, g.H); i++ {
					for _, v := range in[i*g.W+max(w0, 0) : i*g.W+min(w0+kernel, g.W)] {
						acc += v
					}
				}
				out[oh*g.OW+ow] = acc * inv
			}
		}
	}
}

// AvgPool2dBackward spreads dy evenly over each window, returning dx of
// shape xShape.
func AvgPool2dBackward(dy *Tensor, xShape []int, kernel, stride, padding int) *Tensor {
	g := NewConvGeom("AvgPool2dBackward", xShape, kernel, kernel, stride, padding)
	if want := []int{g.N, g.C, g.OH, g.OW}; !slices.Equal(dy.shape, want) {
		panicf("AvgPool2dBackward: gradient shape %v, want %v for input shape %v", dy.shape, want, xShape)
	}
	if dy.buf != nil {
		dev, be := deviceOf("AvgPool2dBackward", dy)
		dx := NewOn(dev, xShape...)
		if dy.Len() > 0 {
			be.AvgPool2dBackward(dx, dy, kernel, stride, padding)
		}
		return dx
	}
	dx := New(xShape...)
	avgPoolPlanes(g, kernel, stride, padding, dx.Data(), dy.Contiguous().Data(), true)
	return dx
}
