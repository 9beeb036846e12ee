package cudatensor

import (
	"fmt"
	"math"

	"github.com/cohortml/cohort/device/cuda"
	"github.com/cohortml/cohort/device/kernels"
	"github.com/cohortml/cohort/optim"
	"github.com/cohortml/cohort/tensor"
)

var (
	_ tensor.Backend      = backend{}
	_ optim.DeviceKernels = backend{}
)

func (backend) AdamUpdate(param, grad, expAvg, expAvgSq, maxExpAvgSq *tensor.Tensor, h optim.AdamHyper, step int64) {
	const op = "AdamUpdate"
	contig(op, param, grad, expAvg, expAvgSq, maxExpAvgSq)
	a := kernels.NewAdamScalars(h.LR, h.WeightDecay, h.Beta1, h.Beta2, h.Eps, step, h.Decoupled, h.AMSGrad, h.Maximize)
	n := n64(param)
	stOf(param).launch(op, "adam_step_f32", kernels.Problem{N: n}, ptr(p(param)), ptr(p(grad)), ptr(p(expAvg)), ptr(p(expAvgSq)), ptr(p(maxExpAvgSq)),
		i64(n), f32(a.Sign), f32(a.Decay), f32(a.L2), f32(a.B1), f32(a.C1), f32(a.B2), f32(a.C2), f32(a.BC2Sqrt), f32(a.Eps), f32(a.StepSize),
		i32(a.HasL2), i32(a.AMSGrad))
}

func (backend) SGDUpdate(param, grad, buf *tensor.Tensor, h optim.SGDHyper, step int64) {
	const op = "SGDUpdate"
	contig(op, param, grad, buf)
	a := kernels.NewSGDScalars(h.LR, h.WeightDecay, h.Momentum, h.Dampening, h.Nesterov, h.Maximize, step)
	n := n64(param)
	stOf(param).launch(op, "sgd_step_f32", kernels.Problem{N: n}, ptr(p(param)), ptr(p(grad)), ptr(p(buf)),
		i64(n), f32(a.Sign), f32(a.WD), f32(a.Mom), f32(a.Damp), f32(a.LR), i32(a.HasWD), i32(a.Momentum), i32(a.Nesterov), i32(a.First))
}

// GradNorm sums g² on the device for the 2-norm, |g|^p for another finite
// p, or takes max |g| for the ∞-norm (pairwise maxima, halving the array),
// and reads the result back as one float.
func (backend) GradNorm(g *tensor.Tensor, normType float64) float64 {
	const op = "GradNorm"
	contig(op, g)
	if math.IsNaN(normType) || math.IsInf(normType, -1) {
		missing(op, g.Device(), fmt.Sprintf("norm type %g", normType))
	}
	s := stOf(g)
	out := s.scratch(op, 1)
	if math.IsInf(normType, 1) {
		n := g.Len()
		if n == 0 {
			return 0
		}
		t := s.scratch(op, n)
		s.launch(op, "unary_f32", kernels.Problem{N: int64(n)}, ptr(p(t)), ptr(p(g)), i64(int64(n)), i32(unaryCodes[tensor.UnaryAbs]), f32(0))
		for n > 1 {
			h := n / 2 // max(t[i], t[n−h+i]) into t[i]; the middle of an odd n stays
			s.launch(op, "binary_f32", kernels.Problem{N: int64(h)}, ptr(p(t)), ptr(p(t)), ptr(p(t)+cuda.DevicePtr(4*(n-h))), i64(int64(h)), i32(binaryCodes[tensor.BinaryMax]))
			n -= h
		}
		out = t
	} else if normType == 2 {
		s.reduce(op, "reduce_sumsq_partial_f32", p(out), g, false)
	} else {
		n := n64(g)
		t := s.scratch(op, max(int(n), 1))
		s.launch(op, "unary_f32", kernels.Problem{N: n}, ptr(p(t)), ptr(p(g)), i64(n), i32(unaryCodes[tensor.UnaryAbs]), f32(0))
		s.launch(op, "unary_f32", kernels.Problem{N: n}, ptr(p(t)), ptr(p(t)), i64(n), i32(unaryCodes[tensor.UnaryPow]), f32(float32(normType)))
		s.reduce(op, "reduce_sum_partial_f32", p(out), t.Narrow(0, 0, int(n)), false)
	}
	var v [1]float32
	backend{}.Download(v[:], buf(out), 0)
	return float64(v[0])
}
