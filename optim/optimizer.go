package optim

import (
	"errors"
	"fmt"
	"math"

	"github.com/cohortml/cohort/autograd"
	"github.com/cohortml/cohort/tensor"
)

// ErrInvalid is wrapped by every error about a bad hyperparameter, parameter
// list or state dict.
var ErrInvalid = errors.New("optim: invalid argument")

// invalidError carries a full "optim: ..." message and matches ErrInvalid.
type invalidError struct{ msg string }

func (e *invalidError) Error() string        { return e.msg }
func (e *invalidError) Is(target error) bool { return target == ErrInvalid }

// invalid returns an error "optim: <op>: <message>" wrapping ErrInvalid.
func invalid(op, format string, args ...any) error {
	return &invalidError{"optim: " + op + ": " + fmt.Sprintf(format, args...)}
}

// Optimizer is implemented by SGD and Adam (which also serves AdamW).
type Optimizer interface {
	// Step applies one update to every parameter whose Grad is non-nil.
	Step()
	// ZeroGrad sets every non-nil Grad to zero in place.
	ZeroGrad()
	// NumGroups returns the number of parameter groups.
	NumGroups() int
	// LR returns the current learning rate of group g.
	LR(g int) float64
	// SetLR sets the learning rate of group g; it panics when g is out of
	// range or lr is negative or not finite.
	SetLR(g int, lr float64)
	// StateDict returns the optimizer's state; its tensors alias the live
	// state (copy them for a snapshot that later steps must not change).
	StateDict() *StateDict
	// LoadStateDict replaces the state with sd, copying tensor data into
	// the existing state buffers. Nothing changes when it returns an error.
	LoadStateDict(sd *StateDict) error
}

// Group is a set of parameters sharing a learning rate and a weight decay
// (PyTorch's param_groups). Every field is taken literally.
type Group struct {
	Params      []*autograd.Var
	LR          float64
	WeightDecay float64
}

// base holds what every optimizer shares: the groups, the flat parameter
// list (group order) and the number of updates each parameter has had.
//
// Invariant: len(params) == len(steps) == the sum of len(groups[g].Params).
type base struct {
	name   string // type name for messages: "SGD", "Adam", "AdamW"
	groups []Group
	params []*autograd.Var
	group  []int // group of each flat parameter
	steps  []int64
}

func newBase(name string, groups []Group) (base, error) {
	op := "New" + name
	b := base{name: name, groups: make([]Group, len(groups))}
	seen := map[*autograd.Var]string{}
	for g, gr := range groups {
		if err := checkHyper(op, fmt.Sprintf("group %d: lr", g), gr.LR); err != nil {
			return base{}, err
		}
		if err := checkHyper(op, fmt.Sprintf("group %d: weight decay", g), gr.WeightDecay); err != nil {
			return base{}, err
		}
		for j, p := range gr.Params {
			at := fmt.Sprintf("group %d param %d", g, j)
			switch {
			case p == nil:
				return base{}, invalid(op, "%s is nil", at)
			case p.Value == nil:
				return base{}, invalid(op, "%s has a nil Value", at)
			case !p.IsLeaf():
				return base{}, invalid(op, "%s is not a leaf (optimizers update leaves only)", at)
			case !p.Value.IsContiguous():
				return base{}, invalid(op, "%s Value is a non-contiguous view (shape %v, strides %v)",
					at, p.Value.Shape(), p.Value.Strides())
			}
			if prev, dup := seen[p]; dup {
				return base{}, invalid(op, "%s is the same parameter as %s", at, prev)
			}
			seen[p] = at
			b.params = append(b.params, p)
			b.group = append(b.group, g)
		}
		b.groups[g] = Group{Params: append([]*autograd.Var(nil), gr.Params...), LR: gr.LR, WeightDecay: gr.WeightDecay}
	}
	if len(b.params) == 0 {
		return base{}, invalid(op, "no parameters to optimize")
	}
	b.steps = make([]int64, len(b.params))
	return b, nil
}

// checkHyper requires v to be finite and >= 0.
func checkHyper(op, what string, v float64) error {
	if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
		return invalid(op, "%s = %v, want a finite value >= 0", what, v)
	}
	return nil
}

// checkBeta requires v in [0, 1).
func checkBeta(op, what string, v float64) error {
	if !(v >= 0 && v < 1) {
		return invalid(op, "%s = %v is outside [0, 1)", what, v)
	}
	return nil
}

// NumGroups returns the number of parameter groups.
func (b *base) NumGroups() int { return len(b.groups) }

// LR returns the learning rate of group g.
func (b *base) LR(g int) float64 { return b.groups[b.checkGroup("LR", g)].LR }

// SetLR sets the learning rate of group g.
func (b *base) SetLR(g int, lr float64) {
	b.checkGroup("SetLR", g)
	if err := checkHyper(b.name+".SetLR", fmt.Sprintf("group %d: lr", g), lr); err != nil {
		panic(err.Error())
	}
	b.groups[g].LR = lr
}

func (b *base) checkGroup(op string, g int) int {
	if g < 0 || g >= len(b.groups) {
		panic(fmt.Sprintf("optim: %s.%s: group %d out of range [0, %d)", b.name, op, g, len(b.groups)))
	}
	return g
}

// ZeroGrad sets every non-nil Grad to zero in place, keeping views intact.
func (b *base) ZeroGrad() {
	for _, p := range b.params {
		if p.Grad != nil {
			zero(p.Grad)
		}
	}
}

// zero clears the elements of t, contiguous or not.
func zero(t *tensor.Tensor) {
	if !t.Device().IsCPU() {
		t.Zero()
		return
	}
	if t.IsContiguous() {
		clear(t.Data())
		return
	}
	zeroStrided(t.Storage(), t.Offset(), t.Shape(), t.Strides())
}

func zeroStrided(s []float32, off int, shape, strides []int) {
	if len(shape) == 0 {
		s[off] = 0
		return
	}
	for i := 0; i < shape[0]; i++ {
		zeroStrided(s, off+i*strides[0], shape[1:], strides[1:])
	}
}

// grad returns the gradient data of flat parameter i and whether it has
// one. It panics when Grad's shape differs from Value's or either is not
// contiguous.
func (b *base) grad(i int) (value, grad []float32, ok bool) {
	p := b.params[i]
	if p.Value.Buffer() != nil || p.Grad != nil && p.Grad.Buffer() != nil {
		sameDevice(b.name+".Step", i, tensor.CPU, p.Value, p.Grad) // the state is on the host
	}
	if p.Grad == nil {
		return nil, nil, false
	}
	if !p.Grad.SameShape(p.Value) {
		panic(fmt.Sprintf("optim: %s.Step: parameter %d: grad shape %v differs from value shape %v",
			b.name, i, p.Grad.Shape(), p.Value.Shape()))
	}
	if !p.Grad.IsContiguous() || !p.Value.IsContiguous() {
		panic(fmt.Sprintf("optim: %s.Step: parameter %d: value or grad is a non-contiguous view (shape %v)",
			b.name, i, p.Value.Shape()))
	}
	return p.Value.Data(), p.Grad.Data(), true
}

// checkDeviceGrad reports whether parameter i, whose state lives on dev,
// has a gradient, panicking when its value or gradient is elsewhere (moved
// after the optimizer was built), of another shape or not contiguous.
func (b *base) checkDeviceGrad(i int, dev tensor.Device) bool {
	p := b.params[i]
	op := b.name + ".Step"
	sameDevice(op, i, dev, p.Value, p.Grad)
	if p.Grad == nil {
		return false
	}
	if !p.Grad.SameShape(p.Value) || !p.Grad.IsContiguous() || !p.Value.IsContiguous() {
		panic(fmt.Sprintf("optim: %s: parameter %d: grad shape %v, value shape %v: want equal and contiguous", op, i, p.Grad.Shape(), p.Value.Shape()))
	}
	return true
}
