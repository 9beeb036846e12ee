package kernels

import "math"

// AdamScalars are adam_step's scalar arguments for one update, derived
// from the hyperparameters and the 1-based step t as optim.AdamUpdate
// derives them (so the kernel repeats the CPU's float32 operations):
// sign ±1 (Maximize), decay = 1 − lr·wd for AdamW (Decoupled) else 1,
// l2 = wd, c = 1 − β, bc2_sqrt = √(1 − β2^t), step_size = −lr/(1 − β1^t),
// each rounded once to float32.
type AdamScalars struct {
	Sign, Decay, L2, B1, C1, B2, C2, BC2Sqrt, Eps, StepSize float32
	HasL2, AMSGrad                                          int
}

// NewAdamScalars computes AdamScalars; decoupled selects AdamW.
func NewAdamScalars(lr, wd, beta1, beta2, eps float64, step int64, decoupled, amsgrad, maximize bool) AdamScalars {
	t := float64(step)
	s := AdamScalars{Sign: 1, Decay: 1, L2: float32(wd),
		B1: float32(beta1), C1: float32(1 - beta1), B2: float32(beta2), C2: float32(1 - beta2),
		BC2Sqrt: float32(math.Sqrt(1 - math.Pow(beta2, t))), Eps: float32(eps),
		StepSize: float32(-lr / (1 - math.Pow(beta1, t)))}
	if maximize {
		s.Sign = -1
	}
	if decoupled {
		s.Decay = float32(1 - lr*wd)
	} else if wd != 0 {
		s.HasL2 = 1
	}
	if amsgrad {
		s.AMSGrad = 1
	}
	return s
}

// SGDScalars are sgd_step's scalar arguments, as optim.SGDUpdate derives
// them: damp = 1 − dampening; First is 1 on the step that initialises the
// momentum buffer.
type SGDScalars struct {
	Sign, WD, Mom, Damp, LR          float32
	HasWD, Momentum, Nesterov, First int
}

// NewSGDScalars computes SGDScalars for the 1-based step.
func NewSGDScalars(lr, wd, momentum, dampening float64, nesterov, maximize bool, step int64) SGDScalars {
	s := SGDScalars{Sign: 1, WD: float32(wd), Mom: float32(momentum), Damp: float32(1 - dampening), LR: float32(lr)}
	if maximize {
		s.Sign = -1
	}
	if wd != 0 {
		s.HasWD = 1
	}
	if momentum != 0 {
		s.Momentum = 1
	}
	if nesterov {
		s.Nesterov = 1
	}
	if step == 1 {
		s.First = 1
	}
	return s
}
