package optim

import (
	"fmt"

	"github.com/cohortml/cohort/tensor"
)

// SGDOptions are SGD's hyperparameters other than the per-group learning
// rate and weight decay. The zero value is plain SGD, PyTorch's default.
type SGDOptions struct {
	Momentum  float64 // >= 0; 0 disables the momentum buffer
	Dampening float64 // >= 0; must be 0 with Nesterov
	Nesterov  bool    // needs Momentum > 0
	Maximize  bool    // ascend instead of descend
}

// scalars lists the options as StateDict saves them.
func (o *SGDOptions) scalars() []optionScalar {
	return []optionScalar{{key: "momentum", num: &o.Momentum}, {key: "dampening", num: &o.Dampening},
		{key: "nesterov", flag: &o.Nesterov}, {key: "maximize", flag: &o.Maximize}}
}

func (o *SGDOptions) buffers() (string, any, bool) { return "momentum", o.Momentum, o.Momentum != 0 }

func (o SGDOptions) validate(op string) error {
	if err := checkHyper(op, "momentum", o.Momentum); err != nil {
		return err
	}
	if err := checkHyper(op, "dampening", o.Dampening); err != nil {
		return err
	}
	if o.Nesterov && (o.Momentum <= 0 || o.Dampening != 0) {
		return invalid(op, "nesterov needs momentum > 0 and dampening = 0 (got momentum %v, dampening %v)",
			o.Momentum, o.Dampening)
	}
	return nil
}

// SGDHyper is everything one SGD update needs besides the data.
type SGDHyper struct {
	LR, WeightDecay, Momentum, Dampening float64
	Nesterov, Maximize                   bool
}

// SGDUpdate applies update number step (1-based) of SGD to param in place
// with the formula and operation order of PyTorch 1.13's torch.optim.SGD,
// in float32 (the hyperparameters rounded to float32), per element:
//
//	g = ±grad + weightDecay·param            (− when Maximize)
//	buf = g                                  on step 1
//	buf = momentum·buf + (1 − dampening)·g   afterwards
//	g = g + momentum·buf if Nesterov, else buf
//	param = param − lr·g
//
// The weight-decay term is skipped when WeightDecay is 0 and the momentum
// lines when Momentum is 0 (buf may then be nil), as in PyTorch.
// The update is elementwise: splitting the slices anywhere and updating
// the pieces gives bit-for-bit the same result. It panics when the slices'
// lengths differ or step < 1.
func SGDUpdate(param, grad, buf []float32, h SGDHyper, step int64) {
	n := len(param)
	if len(grad) != n || (h.Momentum != 0 && len(buf) != n) || step < 1 {
		panic(fmt.Sprintf("optim: SGDUpdate: len(param) = %d, len(grad) = %d, len(buf) = %d (momentum %v), step %d",
			n, len(grad), len(buf), h.Momentum, step))
	}
	c := sgdConsts{sign: 1, wd: float32(h.WeightDecay), mom: float32(h.Momentum), damp: float32(1 - h.Dampening),
		lr: float32(h.LR), hasWD: flag(h.WeightDecay != 0), momentum: flag(h.Momentum != 0), nesterov: flag(h.Nesterov)}
	if h.Maximize {
		c.sign = -1
	}
	sgdKernel(param, grad, buf, &c, step == 1)
}

// SGD is stochastic gradient descent with optional momentum, dampening,
// Nesterov momentum and weight decay (PyTorch's torch.optim.SGD).
type SGD struct {
	base
	opts     SGDOptions
	momentum [][]float32      // per parameter; nil when Momentum == 0
	devBuf   []*tensor.Tensor // momentum buffers of parameters on a device; nil when Momentum == 0
	onDevice []bool           // per parameter; nil when every one is on the CPU
}

var _ Optimizer = (*SGD)(nil)

// NewSGD returns an SGD optimizer over groups. Momentum buffers (when
// Momentum > 0) are allocated here, one []float32 per parameter.
func NewSGD(groups []Group, o SGDOptions) (*SGD, error) {
	if err := o.validate("NewSGD"); err != nil {
		return nil, err
	}
	b, err := newBase("SGD", groups)
	if err != nil {
		return nil, err
	}
	s := &SGD{base: b, opts: o}
	for i, p := range b.params {
		if !p.Value.Device().IsCPU() {
			if s.onDevice == nil {
				s.onDevice = make([]bool, len(b.params))
			}
			s.onDevice[i] = true
		}
	}
	if o.Momentum != 0 {
		s.momentum = make([][]float32, len(b.params))
		for i, p := range b.params {
			if s.onDevice != nil && s.onDevice[i] {
				if s.devBuf == nil {
					s.devBuf = make([]*tensor.Tensor, len(b.params))
				}
				s.devBuf[i] = tensor.NewOn(p.Value.Device(), p.Value.Shape()...)
				continue
			}
			s.momentum[i] = make([]float32, p.Value.Len())
		}
	}
	return s, nil
}

// Hyper returns the update hyperparameters of group g.
func (s *SGD) Hyper(g int) SGDHyper {
	gr := s.groups[s.checkGroup("Hyper", g)]
	return SGDHyper{LR: gr.LR, WeightDecay: gr.WeightDecay, Momentum: s.opts.Momentum,
		Dampening: s.opts.Dampening, Nesterov: s.opts.Nesterov, Maximize: s.opts.Maximize}
}

// Step applies one update to every parameter that has a gradient.
func (s *SGD) Step() {
	for i := range s.params {
		if s.onDevice != nil && s.onDevice[i] {
			p := s.params[i]
			var buf *tensor.Tensor
			if s.devBuf != nil {
				buf = s.devBuf[i]
			}
			if s.checkDeviceGrad(i, p.Value.Device()) {
				s.steps[i]++
				deviceKernels("SGD.Step", p.Value).SGDUpdate(p.Value, p.Grad, buf, s.Hyper(s.group[i]), s.steps[i])
			}
			continue
		}
		value, grad, ok := s.grad(i)
		if !ok {
			continue
		}
		var buf []float32
		if s.momentum != nil {
			buf = s.momentum[i]
		}
		s.steps[i]++
		SGDUpdate(value, grad, buf, s.Hyper(s.group[i]), s.steps[i])
	}
}

// StateDict returns the state: kind "sgd", per-parameter momentum_buffer
// (when Momentum > 0) and step, group and option scalars.
func (s *SGD) StateDict() *StateDict {
	sd := newStateDict("sgd")
	s.putCommon(sd)
	for i, buf := range s.momentum {
		if s.devBuf != nil && s.devBuf[i] != nil {
			sd.Tensors[stateKey(i, "momentum_buffer")] = s.devBuf[i]
			continue
		}
		s.putTensor(sd, i, "momentum_buffer", buf)
	}
	putOptions(sd, s.opts.scalars())
	return sd
}

// LoadStateDict restores a state saved by StateDict from an SGD with the
// same parameter layout and the same Momentum being zero or not.
func (s *SGD) LoadStateDict(sd *StateDict) error {
	return loadStateDict(&s.base, &s.opts, s.StateDict(), sd)
}
