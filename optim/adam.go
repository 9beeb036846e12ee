package optim

import (
	"fmt"
	"math"

	"github.com/cohortml/cohort/tensor"
)

// AdamOptions are Adam's and AdamW's hyperparameters other than the
// per-group learning rate and weight decay. Every field is taken
// literally (Beta1 = 0 is a real setting), so start from AdamDefaults.
type AdamOptions struct {
	Beta1, Beta2 float64 // each in [0, 1)
	Eps          float64 // >= 0, added to the denominator
	AMSGrad      bool    // use the running maximum of the second moment
	Maximize     bool    // ascend instead of descend
}

// AdamDefaults returns PyTorch's defaults: betas (0.9, 0.999), eps 1e-8.
func AdamDefaults() AdamOptions { return AdamOptions{Beta1: 0.9, Beta2: 0.999, Eps: 1e-8} }

// scalars lists the options as StateDict saves them.
func (o *AdamOptions) scalars() []optionScalar {
	return []optionScalar{{key: "beta1", num: &o.Beta1}, {key: "beta2", num: &o.Beta2}, {key: "eps", num: &o.Eps},
		{key: "amsgrad", flag: &o.AMSGrad}, {key: "maximize", flag: &o.Maximize}}
}

func (o *AdamOptions) buffers() (string, any, bool) { return "amsgrad", o.AMSGrad, o.AMSGrad }

func (o AdamOptions) validate(op string) error {
	if err := checkBeta(op, "beta1", o.Beta1); err != nil {
		return err
	}
	if err := checkBeta(op, "beta2", o.Beta2); err != nil {
		return err
	}
	return checkHyper(op, "eps", o.Eps)
}

// AdamHyper is everything one Adam or AdamW update needs besides the data.
type AdamHyper struct {
	LR, WeightDecay, Beta1, Beta2, Eps float64
	// Decoupled selects AdamW's weight decay (param scaled by 1 − lr·wd)
	// over Adam's L2 term added to the gradient.
	Decoupled, AMSGrad, Maximize bool
}

// AdamState is the state of Adam for one parameter or one contiguous shard
// of a flat buffer: each moment is its own slice of the data's length
// (MaxExpAvgSq only with AMSGrad). Slice returns the state of a sub-range.
type AdamState struct {
	ExpAvg, ExpAvgSq, MaxExpAvgSq []float32
}

// NewAdamState allocates zeroed state for n elements.
func NewAdamState(n int, amsgrad bool) AdamState {
	s := AdamState{ExpAvg: make([]float32, n), ExpAvgSq: make([]float32, n)}
	if amsgrad {
		s.MaxExpAvgSq = make([]float32, n)
	}
	return s
}

// Slice returns the state of elements [lo, hi), aliasing s.
func (s AdamState) Slice(lo, hi int) AdamState {
	r := AdamState{ExpAvg: s.ExpAvg[lo:hi], ExpAvgSq: s.ExpAvgSq[lo:hi]}
	if s.MaxExpAvgSq != nil {
		r.MaxExpAvgSq = s.MaxExpAvgSq[lo:hi]
	}
	return r
}

// AdamUpdate applies update number step (1-based) of Adam or AdamW to
// param in place with the formulas and operation order of PyTorch 1.13's
// torch.optim.Adam / AdamW, in float32 (the hyperparameters and bias
// corrections rounded to float32), per element (t = step):
//
//	g = ±grad                                     (− when Maximize)
//	param = (1 − lr·wd)·param                     AdamW (Decoupled)
//	g = g + wd·param                              Adam, when wd != 0
//	m = β1·m + (1 − β1)·g
//	v = β2·v + (1 − β2)·g²
//	vmax = max(vmax, v); use vmax for v below     AMSGrad (a NaN v wins)
//	param = param − lr/(1 − β1^t) · m / (√v / √(1 − β2^t) + eps)
//
// The update is elementwise: splitting the slices anywhere and updating
// the pieces with the same step gives bit-for-bit the same result. It
// panics when the slices' lengths differ or step < 1.
func AdamUpdate(param, grad []float32, s AdamState, h AdamHyper, step int64) {
	n := len(param)
	if len(grad) != n || len(s.ExpAvg) != n || len(s.ExpAvgSq) != n ||
		(h.AMSGrad && len(s.MaxExpAvgSq) != n) || step < 1 {
		panic(fmt.Sprintf("optim: AdamUpdate: len(param) = %d, len(grad) = %d, len(ExpAvg) = %d, len(ExpAvgSq) = %d, len(MaxExpAvgSq) = %d (amsgrad %v), step %d",
			n, len(grad), len(s.ExpAvg), len(s.ExpAvgSq), len(s.MaxExpAvgSq), h.AMSGrad, step))
	}
	t := float64(step)
	c := adamConsts{sign: 1, decay: 1, l2: float32(h.WeightDecay),
		b1: float32(h.Beta1), c1: float32(1 - h.Beta1), b2: float32(h.Beta2), c2: float32(1 - h.Beta2),
		bc2Sqrt: float32(math.Sqrt(1 - math.Pow(h.Beta2, t))), eps: float32(h.Eps),
		stepSize: float32(-h.LR / (1 - math.Pow(h.Beta1, t))),
		hasL2:    flag(!h.Decoupled && h.WeightDecay != 0), amsgrad: flag(h.AMSGrad)}
	if h.Maximize {
		c.sign = -1
	}
	if h.Decoupled {
		c.decay = float32(1 - h.LR*h.WeightDecay)
	}
	adamKernel(param, grad, s.ExpAvg, s.ExpAvgSq, s.MaxExpAvgSq, &c)
}

// Adam is Adam with L2 weight decay (torch.optim.Adam) or, built by
// NewAdamW, Adam with decoupled weight decay (torch.optim.AdamW).
type Adam struct {
	base
	opts      AdamOptions
	decoupled bool
	state     []AdamState        // per parameter on the CPU
	devState  []*deviceAdamState // per parameter; non-nil for one on a device
}

var _ Optimizer = (*Adam)(nil)

// NewAdam returns Adam over groups; a group's WeightDecay adds wd·param to
// the gradient (L2). State is allocated here.
func NewAdam(groups []Group, o AdamOptions) (*Adam, error) { return newAdam("Adam", groups, o, false) }

// NewAdamW returns AdamW over groups; a group's WeightDecay scales the
// parameter by 1 − lr·wd before the Adam update. (PyTorch's AdamW defaults
// to weight decay 0.01; here each group states its own.)
func NewAdamW(groups []Group, o AdamOptions) (*Adam, error) { return newAdam("AdamW", groups, o, true) }

func newAdam(name string, groups []Group, o AdamOptions, decoupled bool) (*Adam, error) {
	if err := o.validate("New" + name); err != nil {
		return nil, err
	}
	b, err := newBase(name, groups)
	if err != nil {
		return nil, err
	}
	a := &Adam{base: b, opts: o, decoupled: decoupled, state: make([]AdamState, len(b.params))}
	for i, p := range b.params {
		if dev := p.Value.Device(); !dev.IsCPU() {
			if a.devState == nil {
				a.devState = make([]*deviceAdamState, len(b.params))
			}
			shape := p.Value.Shape()
			ds := &deviceAdamState{expAvg: tensor.NewOn(dev, shape...), expAvgSq: tensor.NewOn(dev, shape...)}
			if o.AMSGrad {
				ds.maxExpAvgSq = tensor.NewOn(dev, shape...)
			}
			a.devState[i] = ds
			continue
		}
		a.state[i] = NewAdamState(p.Value.Len(), o.AMSGrad)
	}
	return a, nil
}

// Hyper returns the update hyperparameters of group g.
func (a *Adam) Hyper(g int) AdamHyper {
	gr := a.groups[a.checkGroup("Hyper", g)]
	return AdamHyper{LR: gr.LR, WeightDecay: gr.WeightDecay, Beta1: a.opts.Beta1, Beta2: a.opts.Beta2,
		Eps: a.opts.Eps, Decoupled: a.decoupled, AMSGrad: a.opts.AMSGrad, Maximize: a.opts.Maximize}
}

// Step applies one update to every parameter that has a gradient. A
// parameter on a device is updated there, by its backend's DeviceKernels;
// its state was allocated there by the constructor.
func (a *Adam) Step() {
	for i := range a.params {
		if a.devState != nil && a.devState[i] != nil {
			p, ds := a.params[i], a.devState[i]
			if a.checkDeviceGrad(i, ds.expAvg.Device()) {
				a.steps[i]++
				deviceKernels(a.name+".Step", p.Value).AdamUpdate(p.Value, p.Grad, ds.expAvg, ds.expAvgSq, ds.maxExpAvgSq, a.Hyper(a.group[i]), a.steps[i])
			}
			continue
		}
		value, grad, ok := a.grad(i)
		if !ok {
			continue
		}
		a.steps[i]++
		AdamUpdate(value, grad, a.state[i], a.Hyper(a.group[i]), a.steps[i])
	}
}

func (a *Adam) kind() string {
	if a.decoupled {
		return "adamw"
	}
	return "adam"
}

// StateDict returns the state: kind "adam" or "adamw", per-parameter
// exp_avg, exp_avg_sq, max_exp_avg_sq (AMSGrad) and step, group and option
// scalars.
func (a *Adam) StateDict() *StateDict {
	sd := newStateDict(a.kind())
	a.putCommon(sd)
	for i, s := range a.state {
		if a.devState != nil && a.devState[i] != nil {
			ds := a.devState[i]
			sd.Tensors[stateKey(i, "exp_avg")] = ds.expAvg
			sd.Tensors[stateKey(i, "exp_avg_sq")] = ds.expAvgSq
			if ds.maxExpAvgSq != nil {
				sd.Tensors[stateKey(i, "max_exp_avg_sq")] = ds.maxExpAvgSq
			}
			continue
		}
		a.putTensor(sd, i, "exp_avg", s.ExpAvg)
		a.putTensor(sd, i, "exp_avg_sq", s.ExpAvgSq)
		if s.MaxExpAvgSq != nil {
			a.putTensor(sd, i, "max_exp_avg_sq", s.MaxExpAvgSq)
		}
	}
	putOptions(sd, a.opts.scalars())
	return sd
}

// LoadStateDict restores a state saved by StateDict from an optimizer of
// the same kind, parameter layout and AMSGrad setting.
func (a *Adam) LoadStateDict(sd *StateDict) error {
	return loadStateDict(&a.base, &a.opts, a.StateDict(), sd)
}
