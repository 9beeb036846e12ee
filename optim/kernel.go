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
	if c.momentum != 0 {
		buf = buf[:n]
	}
	for i, p := range param {
		g := float32(c.sign * grad[i])
		if c.hasWD != 0 {
			g += float32(c.wd * p)
		}
		if c.momentum != 0 {
			b := g
			if !first {
				b = float32(c.mom*buf[i]) + float32(c.damp*g)
			}
			buf[i] = b
			if c.nesterov != 0 {
				g += float32(c.mom * b)
			} else {
				g = b
			}
		}
		param[i] = p - float32(c.lr*g)
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
	if c.amsgrad != 0 {
		vmax = vmax[:n]
	}
	for i := range param {
		g := float32(c.sign * grad[i])
		p := float32(param[i] * c.decay)
		if c.hasL2 != 0 {
			g += float32(c.l2 * p)
		}
		mi := float32(c.b1*m[i]) + float32(c.c1*g)
		vi := float32(c.b2*v[i]) + float32(float32(c.c2*g)*g)
		m[i], v[i] = mi, vi
		if c.amsgrad != 0 {
			if vmax[i] > vi { // VMAXPS semantics: NaN in either yields vi
				vi = vmax[i]
			}
			vmax[i] = vi
		}
		denom := sqrt32(vi)/c.bc2Sqrt + c.eps
		param[i] = p + float32(c.stepSize*mi)/denom
	}
}

func sqrt32(x float32) float32 { return float32(math.Sqrt(float64(x))) }

func flag(b bool) uint32 {
	if b {
		return 1
	}
	return 0
}
