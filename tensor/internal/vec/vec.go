package vec

import (
	"fmt"
	"math"
)

// Add adds src[:len(dst)] onto dst.
func Add(dst, src []float32) {
	src = src[:len(dst)]
	if len(dst) == 0 {
		return
	}
	if useAVX2 {
		addAVX2(&dst[0], &src[0], len(dst))
		return
	}
	addGo(dst, src)
}

// AddRows adds a rows×cols block of src onto dst: row r of each starts at
// r·srcStride and r·dstStride.
func AddRows(dst []float32, dstStride int, src []float32, srcStride int, rows, cols int) {
	if rows <= 0 || cols <= 0 {
		return
	}
	_ = dst[(rows-1)*dstStride+cols-1]
	_ = src[(rows-1)*srcStride+cols-1]
	if useAVX2 {
		addRowsAVX2(&dst[0], dstStride, &src[0], srcStride, rows, cols)
		return
	}
	for r := 0; r < rows; r++ {
		addGo(dst[r*dstStride:][:cols], src[r*srcStride:])
	}
}

// SumRows adds the rows of the rows×len(dst) block src (row r at
// r·srcStride) onto dst, each column in row order: dst[j] += src[j], then
// src[srcStride+j], and so on, the rounding of len(dst)-wide Adds one row
// at a time. The columns' running sums stay in registers across rows.
func SumRows(dst, src []float32, srcStride, rows int) {
	cols := len(dst)
	if rows <= 0 || cols == 0 {
		return
	}
	_ = src[(rows-1)*srcStride+cols-1]
	if !useAVX2 {
		for r := 0; r < rows; r++ {
			addGo(dst, src[r*srcStride:])
		}
		return
	}
	// Blocks of rows, so that a wide block's column strips find the rows
	// the first strip brought in still in cache.
	const block = 32
	full := cols &^ 7
	for r0 := 0; r0 < rows; r0 += block {
		n := min(block, rows-r0)
		if full > 0 {
			sumRowsAVX2(&dst[0], &src[r0*srcStride], srcStride, n, full)
		}
		for r := r0; r < r0+n; r++ {
			addGo(dst[full:], src[r*srcStride+full:])
		}
	}
}

func addGo(dst, src []float32) {
	src = src[:len(dst)]
	for i, v := range src {
		dst[i] += v
	}
}

// ReLU writes max(src, 0) into dst[:len(dst)] with Go's max semantics
// (NaN stays NaN, −0 becomes +0). dst may be src.
func ReLU(dst, src []float32) {
	src = src[:len(dst)]
	if len(dst) == 0 {
		return
	}
	if useAVX2 {
		biasAVX2(&dst[0], &src[0], len(dst), 0, flagReLU)
		return
	}
	reluGo(dst, src)
}

func reluGo(dst, src []float32) {
	src = src[:len(dst)]
	for i, v := range src {
		dst[i] = max(v, 0)
	}
}

// ReLUMask writes g where the ReLU output y is non-zero (positive or NaN)
// and 0 where it is ±0: ReLU's gradient, which is 0 at 0. y must be a ReLU
// output (never negative), as the mask looks only at whether y's bits are
// all zero. dst may be g.
func ReLUMask(dst, g, y []float32) {
	g = g[:len(dst)]
	y = y[:len(dst)]
	if len(dst) == 0 {
		return
	}
	if useAVX2 {
		reluMaskAVX2(&dst[0], &g[0], &y[0], len(dst))
		return
	}
	reluMaskGo(dst, g, y)
}

func reluMaskGo(dst, g, y []float32) {
	g = g[:len(dst)]
	y = y[:len(dst)]
	for i, v := range y {
		b := math.Float32bits(v) &^ (1 << 31) // −0 counts as 0
		m := uint32(int32(-b) >> 31)
		dst[i] = math.Float32frombits(math.Float32bits(g[i]) & m)
	}
}

// Bias writes src + bias into dst[:len(dst)], then max(·, 0) when relu is
// set. dst may be src.
func Bias(dst, src []float32, bias float32, relu bool) {
	src = src[:len(dst)]
	if len(dst) == 0 {
		return
	}
	if useAVX2 {
		f := flagBias
		if relu {
			f |= flagReLU
		}
		biasAVX2(&dst[0], &src[0], len(dst), bias, f)
		return
	}
	biasGo(dst, src, bias, relu)
}

func biasGo(dst, src []float32, bias float32, relu bool) {
	src = src[:len(dst)]
	if relu {
		for i, v := range src {
			dst[i] = max(v+bias, 0)
		}
		return
	}
	for i, v := range src {
		dst[i] = v + bias
	}
}

// Flags of the assembly kernels.
const (
	flagBias = 1 << iota // add the bias
	flagReLU             // apply max(·, 0)
)

// MaxPool2Plane pools the rows×cols 2×2 windows of a plane: window (r, i)
// covers src[2r·stride + 2i], src[2r·stride + 2i + 1] and the two elements
// below them, src[(2r+1)·stride + 2i (+1)]. With useBias it first adds
// bias to every element; dst[r·cols + i] is the window's first maximum in
// that order, or its last NaN (see tensor.MaxPool2d), passed through
// max(·, 0) when relu is set, and arg[r·cols + i] is the index of the
// element chosen in a plane of row width w: 2r·w + 2i plus 0, 1, w or w+1.
func MaxPool2Plane(dst []float32, arg []int32, src []float32, rows, cols, stride int, bias float32, useBias, relu bool, w int) {
	if rows <= 0 || cols <= 0 {
		return
	}
	if stride < 2*cols || w < 2*cols {
		panic(fmt.Sprintf("vec: MaxPool2Plane: %d windows per row, row stride %d, index row width %d", cols, stride, w))
	}
	_ = src[(2*rows-1)*stride+2*cols-1]
	dst = dst[:rows*cols]
	arg = arg[:rows*cols]
	f := 0
	if useBias {
		f |= flagBias
	}
	if relu {
		f |= flagReLU
	}
	switch {
	case useAVX2 && cols >= 8:
		maxPool2PlaneAVX2(&dst[0], &arg[0], &src[0], rows, cols, stride, bias, f, w)
	case useAVX2 && cols >= 4:
		maxPool2Plane4AVX2(&dst[0], &arg[0], &src[0], rows, cols, stride, bias, f, w)
	default:
		for r := 0; r < rows; r++ {
			maxPool2Go(dst[r*cols:][:cols], arg[r*cols:][:cols], src[2*r*stride:], src[(2*r+1)*stride:], bias, f, 2*r*w, w)
		}
	}
}

func maxPool2Go(dst []float32, arg []int32, r0, r1 []float32, bias float32, f, base, w int) {
	n := len(dst)
	arg = arg[:n]
	r0 = r0[:2*n]
	r1 = r1[:2*n]
	for i := range dst {
		a, b, c, d := r0[2*i], r0[2*i+1], r1[2*i], r1[2*i+1]
		if f&flagBias != 0 {
			a, b, c, d = a+bias, b+bias, c+bias, d+bias
		}
		best, bi := a, 0
		best, bi = PickMax(best, bi, b, 1)
		best, bi = PickMax(best, bi, c, w)
		best, bi = PickMax(best, bi, d, w+1)
		if f&flagReLU != 0 {
			best = max(best, 0)
		}
		dst[i], arg[i] = best, int32(base+2*i+bi)
	}
}

// PickMax returns (v, vi) when v beats best (or is NaN), else (best, bi),
// without branching: on random data a branch would mispredict half the
// time.
func PickMax(best float32, bi int, v float32, vi int) (float32, int) {
	take := B2I(v > best) | B2I(v != v)
	bb := math.Float32bits(best)
	best = math.Float32frombits(bb ^ ((bb ^ math.Float32bits(v)) & uint32(-take)))
	return best, bi + take*(vi-bi)
}

// B2I converts a comparison result to 0 or 1 without a branch.
func B2I(b bool) int {
	var i int
	if b {
		i = 1
	}
	return i
}
