//go:build amd64

package optim

import "golang.org/x/sys/cpu"

// Implemented in kernel_amd64.s: the loops of sgdGo (momentum after its
// first step, or none) and adamGo over n elements, n a multiple of 8, with
// AVX2 and the same operation order.

//go:noescape
func sgdAVX2(param, grad, buf *float32, n int, c *sgdConsts)

//go:noescape
func adamAVX2(param, grad, m, v, vmax *float32, n int, c *adamConsts)

//go:noescape
func sumSquaresAVX2(x *float32, n int) float64

// sgdKernel runs whole 8-element blocks with AVX2 when the CPU has it and
// the rest (and the buffer-initialising first step) in Go.
func sgdKernel(param, grad, buf []float32, c *sgdConsts, first bool) {
	if k := len(param) &^ 7; k > 0 && !first && cpu.X86.HasAVX2 {
		var b *float32
		if c.momentum != 0 {
			b, buf = &buf[0], buf[k:]
		}
		sgdAVX2(&param[0], &grad[0], b, k, c)
		param, grad = param[k:], grad[k:]
	}
	sgdGo(param, grad, buf, c, first)
}

// adamKernel runs whole 8-element blocks with AVX2 when the CPU has it and
// the rest in Go.
func adamKernel(param, grad, m, v, vmax []float32, c *adamConsts) {
	if k := len(param) &^ 7; k > 0 && cpu.X86.HasAVX2 {
		var mx *float32
		if c.amsgrad != 0 {
			mx, vmax = &vmax[0], vmax[k:]
		}
		adamAVX2(&param[0], &grad[0], &m[0], &v[0], mx, k, c)
		param, grad, m, v = param[k:], grad[k:], m[k:], v[k:]
	}
	adamGo(param, grad, m, v, vmax, c)
}

// sumSquares returns Σ x² accumulated in float64.
func sumSquares(x []float32) float64 {
	var s float64
	if k := len(x) &^ 15; k > 0 && cpu.X86.HasAVX2 && cpu.X86.HasFMA {
		s = sumSquaresAVX2(&x[0], k)
		x = x[k:]
	}
	return s + sumSquaresGo(x)
}
