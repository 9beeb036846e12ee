package autograd

import (
	"fmt"

	"github.com/cohortml/cohort/tensor"
)

// Var is a tensor in the autograd graph: a leaf (parameter or input) or the
// output of a recorded op.
//
// Gradient contract: Backward accumulates into Grad. When Grad is non-nil
// the gradient is added in place into the existing tensor (so Grad may be a
// view into a flat buffer, e.g. a DDP bucket); when nil a new tensor is
// allocated. Zeroing gradients in place keeps such views intact.
type Var struct {
	Value *tensor.Tensor
	Grad  *tensor.Tensor

	requiresGrad bool
	node         *node // the op that produced this Var; nil for leaves
	// gradBuf is the buffer SetGradBuffer installed while no gradient has
	// been written into it yet (its contents are not a gradient): the
	// first contribution overwrites it. Only while Grad is still gradBuf.
	gradBuf    *tensor.Tensor
	hooks      []hookEntry
	nextHookID int
	// autocast is the dtype of the products that read v (see Autocast):
	// set on leaves, carried by op outputs from their inputs.
	autocast tensor.DType
}

type hookEntry struct {
	id int
	fn func(*Var)
}

// NewVar returns a leaf holding value.
func NewVar(value *tensor.Tensor, requiresGrad bool) *Var {
	if value == nil {
		panic("autograd: NewVar: nil value")
	}
	return &Var{Value: value, requiresGrad: requiresGrad}
}

// SetGradBuffer makes t (contiguous, of v's shape) the leaf v's Grad
// without clearing it: the backward pass's first contribution to v
// overwrites t's contents, whatever they are, and later ones add to it,
// as if t had been zeroed first. A caller who owns a gradient buffer (a
// data-parallel wrapper's bucket) so saves a pass over it. GradWritten
// says whether any contribution came; until one has, Grad's contents are
// not a gradient.
func (v *Var) SetGradBuffer(t *tensor.Tensor) {
	if !t.IsContiguous() || !t.SameShape(v.Value) {
		panic(fmt.Sprintf("autograd: SetGradBuffer: buffer of shape %v (contiguous %v) for a value of shape %v", t.Shape(), t.IsContiguous(), v.Value.Shape()))
	}
	v.Grad, v.gradBuf = t, t
}

// GradWritten reports whether v's Grad holds a gradient: false only while
// the buffer installed by SetGradBuffer is still Grad and nothing has been
// written into it.
func (v *Var) GradWritten() bool { return v.gradBuf == nil || v.Grad != v.gradBuf }

// takeGradBuf reports whether v's Grad is a buffer SetGradBuffer installed
// that nothing was written into yet, and marks it written: the caller
// writes (not adds) the first contribution.
func (v *Var) takeGradBuf() bool {
	fresh := v.gradBuf != nil && v.Grad == v.gradBuf
	v.gradBuf = nil
	return fresh
}

// To moves the leaf v's Value and Grad (when it has one) to dev, in place:
// v keeps its identity, so optimizers and modules holding it see the
// moved tensors. A Grad installed by SetGradBuffer and not yet written
// stays unwritten. Views that aliased the old tensors (a flat gradient
// bucket) are not moved with them: move a model before wrapping it. It
// panics for a non-leaf.
func (v *Var) To(dev tensor.Device) {
	if v.node != nil {
		panic(fmt.Sprintf("autograd: Var.To: %s output is not a leaf", v.node.op))
	}
	v.Value = v.Value.To(dev)
	if v.Grad != nil {
		fresh := v.gradBuf != nil && v.Grad == v.gradBuf
		v.Grad = v.Grad.To(dev)
		v.gradBuf = nil
		if fresh {
			v.gradBuf = v.Grad
		}
	}
}

// RequiresGrad reports whether gradients flow to v.
func (v *Var) RequiresGrad() bool { return v.requiresGrad }

// IsLeaf reports whether v was created by the user rather than by an op.
func (v *Var) IsLeaf() bool { return v.node == nil }

// OnGradReady registers fn to run during Backward the moment v's gradient
// for that pass is final (every contribution accumulated into v.Grad). v
// must be a leaf that requires grad. Hooks run on the goroutine calling
// Backward, in registration order; a hook must not block on Backward. The
// returned function removes the hook.
func (v *Var) OnGradReady(fn func(*Var)) (remove func()) {
	id := v.nextHookID
	v.nextHookID++
	v.hooks = append(v.hooks, hookEntry{id, fn})
	return func() {
		for i, h := range v.hooks {
			if h.id == id {
				v.hooks = append(v.hooks[:i], v.hooks[i+1:]...)
				return
			}
		}
	}
}

// SetRequiresGrad turns gradient tracking on or off for a leaf. It panics
// for a non-leaf, whose tracking follows from its inputs.
func (v *Var) SetRequiresGrad(on bool) {
	if !v.IsLeaf() {
		panic("autograd: SetRequiresGrad on a non-leaf (output of " + v.node.op + ")")
	}
	v.requiresGrad = on
}

// Detach returns a new leaf sharing v's Value (no copy) that does not
// require grad: operations on it are not recorded.
func (v *Var) Detach() *Var { return &Var{Value: v.Value, autocast: v.autocast} }

// ZeroGrad sets v.Grad to zero in place, keeping the tensor (and any flat
// buffer it is a view into); it does nothing when Grad is nil.
func (v *Var) ZeroGrad() {
	if v.Grad != nil {
		v.Grad.Zero()
	}
}

// Op names the operation that produced v ("" for a leaf).
func (v *Var) Op() string {
	if v.node == nil {
		return ""
	}
	return v.node.op
}

// Shape returns v.Value's shape.
func (v *Var) Shape() []int { return v.Value.Shape() }

// NoGrad switches gradient tracking off for every given leaf that has it
// on, and returns a function that switches it back on. While off, ops whose
// inputs all lack gradient tracking record nothing (no graph, no saved
// tensors), which is how evaluation runs without autograd overhead:
//
//	defer autograd.NoGrad(params...)()
//
// There is no global no-grad switch: the state lives on the leaves, so
// other models (and other goroutines using them) are unaffected. Calling
// restore more than once is harmless.
func NoGrad(vars ...*Var) (restore func()) {
	var off []*Var
	for _, v := range vars {
		if v.IsLeaf() && v.requiresGrad {
			v.requiresGrad = false
			off = append(off, v)
		}
	}
	return func() {
		for _, v := range off {
			v.requiresGrad = true
		}
		off = nil
	}
}
