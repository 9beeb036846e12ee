package autograd

import "cohort/tensor"

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
	hooks        []hookEntry
	nextHookID   int
}

type hookEntry struct {
	id int
	fn func(*Var)
}

// node is filled in by the op implementations.
type node struct{}

// NewVar returns a leaf holding value.
func NewVar(value *tensor.Tensor, requiresGrad bool) *Var {
	return &Var{Value: value, requiresGrad: requiresGrad}
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
