package optim

import "math"

// The elementwise loops of SGDUpdate and AdamUpdate. Each float32
// operation is rounded on its own: products are wrapped in explicit
// float32 conversions, which the Go spec says prevents fusing them into
// FMA instructions, so results do not depend on GOAMD64 and the vector
// kernels (kernel_amd64.s) that run the same operations in the same order
// produce identical bits. Splitting the slices anywhere therefore never
// changes a result, whichever mix of vector and scalar code runs.

// sgdConsts are the per-call scalars of SGDUpdate. Field order and types
// are part of the assembly contract (offsets in kernel_amd64.s).
type sgdConsts struct {
	sign, wd, mom, damp, lr float32 // damp is 1 − dampening
	hasWD, momentum         uint32  // booleans: weight decay != 0, momentum != 0
	nesterov                uint32
}

// sgdGo updates param (and buf when momentum is on). first selects the
// momentum buffer's initialisation step.
func sgdGo(param, grad, buf []float32, c *sgdConsts, first bool) {
	n := len(param)
	grad = grad[:n]
	sign, wd, mom, damp, lr := c.sign, c.wd, c.mom, c.damp, c.lr // locals: stores to param cannot alias them
	hasWD, nesterov := c.hasWD != 0, c.nesterov != 0
	if c.momentum == 0 {
		for i, p := range param {
			g := float32(sign * grad[i])
			if hasWD {
				g += float32(wd * p)
			}
			param[i] = p - float32(lr*g)
		}
		return
	}
	buf = buf[:n]
	for i, p := range param {
		g := float32(sign * grad[i])
		if hasWD {
			g += float32(wd * p)
		}
		b := g
		if !first {
			b = float32(mom*buf[i]) + float32(damp*g)
		}
		buf[i] = b
		if nesterov {
			g += float32(mom * b)
		} else {
			g = b
		}
		param[i] = p - float32(lr*g)
	}
}

// adamConsts are the per-call scalars of AdamUpdate. Field order and types
// are part of the assembly contract (offsets in kernel_amd64.s).
type adamConsts struct {
	sign, decay, l2 float32 // decay is 1 − lr·wd for AdamW, else 1
	b1, c1, b2, c2  float32 // c = 1 − β
	bc2Sqrt, eps    float32
	stepSize        float32 // −lr/(1 − β1^t)
	hasL2, amsgrad  uint32
}

// adamGo updates param, m, v and (with amsgrad) vmax.
func adamGo(param, grad, m, v, vmax []float32, c *adamConsts) {
	n := len(param)
	grad, m, v = grad[:n], m[:n], v[:n]
	k := *c // a local copy: stores to the slices cannot alias it
	hasL2, amsgrad := k.hasL2 != 0, k.amsgrad != 0
	if amsgrad {
		vmax = vmax[:n]
	}
	for i := range param {
		g := float32(k.sign * grad[i])
		p := float32(param[i] * k.decay)
		if hasL2 {
			g += float32(k.l2 * p)
		}
		mi := float32(k.b1*m[i]) + float32(k.c1*g)
		vi := float32(k.b2*v[i]) + float32(float32(k.c2*g)*g)
		m[i], v[i] = mi, vi
		if amsgrad {
			if vmax[i] > vi { // VMAXPS semantics: NaN in either yields vi
				vi = vmax[i]
			}
			vmax[i] = vi
		}
		denom := sqrt32(vi)/k.bc2Sqrt + k.eps
		param[i] = p + float32(k.stepSize*mi)/denom
	}
}

func sqrt32(x float32) float32 { return float32(math.Sqrt(float64(x))) }

func flag(b bool) uint32 {
	if b {
		return 1
	}
	return 0
}
