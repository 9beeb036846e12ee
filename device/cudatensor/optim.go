package cudatensor

import (
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

// GradNorm supports the 2-norm (the sum of squares on the device, read
// back as one float); other norms have no kernel.
func (backend) GradNorm(g *tensor.Tensor, normType float64) float64 {
	const op = "GradNorm"
	contig(op, g)
	if normType != 2 {
		missing(op, g.Device(), "a norm other than the 2-norm")
	}
	s := stOf(g)
	out := s.scratch(op, 1)
	s.reduce(op, "reduce_sumsq_partial_f32", p(out), g, false)
	var v [1]float32
	backend{}.Download(v[:], buf(out), 0)
	return float64(v[0])
}
