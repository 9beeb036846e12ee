package autograd

import (
	"container/heap"
	"fmt"

	"github.com/cohortml/cohort/tensor"
)

// node records how a non-leaf Var was computed: its inputs and the
// function that turns the Var's gradient into its inputs' gradients.
//
// Invariant: depth = 1 + max(depth of inputs that have nodes), leaves
// counting 0, so every input's node is strictly shallower than its
// consumer's.
type node struct {
	op       string
	inputs   []*Var
	backward func(g *tensor.Tensor, s *sink)
	depth    int
	released bool // Backward ran through it and dropped its saved state
	// own is the op's output storage when the op allocated it afresh (not
	// a view of an input); transient marks the output as read by nobody
	// once Backward has run through the node (see Transient). Both set:
	// the storage is recycled when the node is released.
	own       *tensor.Tensor
	transient bool
	// scratch is storage the op saved for its backward alone (GELU's
	// pre-activation): dead once the node is released.
	scratch *tensor.Tensor

	// Per-pass state, reset when a Backward first reaches the node.
	pending int            // consumers that have not yet delivered
	grad    *tensor.Tensor // accumulated gradient of the output
	owned   bool           // grad is private to this node (safe to add into)
}

// BackwardFunc turns the gradient of an op's output into the gradients of
// its inputs: one entry per input, nil where an input needs none (see
// Var.RequiresGrad). It must not modify grad. The returned tensors may
// alias grad or each other; the engine never writes into them.
type BackwardFunc func(grad *tensor.Tensor) []*tensor.Tensor

// Record returns the output Var of a custom operation: value computed from
// inputs, with backward to differentiate it. When no input requires grad
// nothing is recorded and the result is a plain leaf without gradient
// tracking. This is how packages outside autograd (tensor-parallel layers,
// pipeline stages) add differentiable operations.
func Record(op string, value *tensor.Tensor, inputs []*Var, backward BackwardFunc) *Var {
	return record(op, value, inputs, func(g *tensor.Tensor, s *sink) {
		s.handedOn = true // a custom op may keep grad (send it on later): never recycle it
		gs := backward(g)
		if len(gs) != len(inputs) {
			panic(fmt.Sprintf("autograd: %s backward returned %d gradients for %d inputs", op, len(gs), len(inputs)))
		}
		for i, gi := range gs {
			if gi != nil {
				s.add(i, gi, false)
			}
		}
	})
}

// InputGrad is one input's gradient as an OwnedBackwardFunc returns it.
// Owned says the op hands T's storage over: nothing else references T (a
// fresh tensor, or the incoming gradient itself when the function was told
// it is private), so the engine may keep it, add into it in place and
// recycle it.
type InputGrad struct {
	T     *tensor.Tensor
	Owned bool
}

// OwnedBackwardFunc is a BackwardFunc that knows whose storage it reads
// and returns. private says grad is the op's alone: nothing else reads it
// after the call unless the op returns it, so the op may write over it
// and return it as Owned (for one input at most). When grad is not
// private the op must not modify it. The engine recycles a private grad
// the op did not return.
type OwnedBackwardFunc func(grad *tensor.Tensor, private bool) []InputGrad

// RecordOwned is Record for a custom op that manages its storage the way
// the built-in ops do, so that a model made of such ops reuses its
// activations and gradients from step to step (see tensor.Empty): its
// backward may work in place on a private gradient and hand its
// gradients over with their ownership. ownsValue says value is storage
// the op allocated for itself (not a view of an input, not kept by the
// op), which Transient then lets Backward recycle.
func RecordOwned(op string, value *tensor.Tensor, ownsValue bool, inputs []*Var, backward OwnedBackwardFunc) *Var {
	v := record(op, value, inputs, func(g *tensor.Tensor, s *sink) {
		private := s.gradPrivate()
		gs := backward(g, private)
		if len(gs) != len(inputs) {
			panic(fmt.Sprintf("autograd: %s backward returned %d gradients for %d inputs", op, len(gs), len(inputs)))
		}
		passed := false
		for i, gi := range gs {
			switch {
			case gi.T == nil:
			case gi.T == g && gi.Owned:
				if !private || passed {
					panic(fmt.Sprintf("autograd: %s backward returned its gradient as owned for input %d, but it is not the op's to hand over", op, i))
				}
				passed = true
				if s.need(i) {
					s.pass(i, g)
				}
			default:
				s.add(i, gi.T, gi.Owned)
			}
		}
	})
	if ownsValue && v.node != nil {
		v.node.own = value
	}
	return v
}

// OnBackward returns a Var with v's value whose backward calls f, then
// passes the gradient on to v unchanged. It marks a point in the graph
// (a sharded wrapper's unit boundary, where the unit's parameters are
// gathered back before the unit's own backward runs). Unlike an identity
// made with Record, the gradient keeps its ownership through it, so it is
// still recycled or updated in place further down. f runs on the
// goroutine calling Backward; it must not keep the gradient.
func OnBackward(op string, v *Var, f func()) *Var {
	if !v.requiresGrad {
		return v
	}
	return record(op, v.Value, []*Var{v}, func(g *tensor.Tensor, s *sink) {
		f()
		if s.gradPrivate() {
			s.pass(0, g)
			return
		}
		s.add(0, g, false)
	})
}

// record is Record for the built-in ops, whose backward functions deliver
// into a sink (which lets them write straight into a leaf's Grad).
func record(op string, value *tensor.Tensor, inputs []*Var, backward func(g *tensor.Tensor, s *sink)) *Var {
	if value == nil {
		panic("autograd: " + op + ": nil value")
	}
	need := false
	depth := 0
	cast := tensor.Float32
	for _, in := range inputs {
		if in.requiresGrad {
			need = true
		}
		if in.node != nil {
			depth = max(depth, in.node.depth)
		}
		cast = max(cast, in.autocast)
	}
	if !need {
		return &Var{Value: value, autocast: cast}
	}
	v := &Var{Value: value, requiresGrad: true, autocast: cast}
	v.node = &node{op: op, inputs: inputs, backward: backward, depth: depth + 1}
	return v
}

// sink collects the input gradients of one node during Backward.
type sink struct {
	e          *engine
	n          *node
	settled    []bool // input i's contribution is complete
	settledBuf [4]bool
	// only, when non-nil, limits the pass to the inputs it marks (the
	// weight pass of BackwardSplit): the others need nothing.
	only []bool
	// handedOn: the op delivered a tensor it does not own (which may be
	// the node's gradient or a view of it), so that gradient lives on.
	handedOn bool
	// keep: the input pass of BackwardSplit on a node it defers to the
	// weight pass, which runs the op again with the same gradient.
	keep bool
	// spent: in the weight pass, the gradient is private to the node
	// (see deferredNode.private) and this is its last use.
	spent bool
	// lent is the node's gradient when the op lent it to input lentTo
	// (see lend).
	lent   *tensor.Tensor
	lentTo int
}

// deferring reports whether this is the input pass of a node whose
// weights' gradients come in BackwardSplit's weight pass (its backward
// runs again then, for the weights only). An op whose gradients come out
// of one computation keeps the weights' part for that second run.
func (s *sink) deferring() bool { return s.keep }

// gradPrivate reports whether the node's incoming gradient is private to
// this backward call: nothing else references it, and nothing will after
// the call unless the op delivers it (or a view of it) through add. An op
// may then write its input gradients over it (ReLU's mask in place).
func (s *sink) gradPrivate() bool {
	if s.only != nil {
		return s.spent // the weight pass: the gradient's last use
	}
	return s.n.owned && !s.keep
}

// need reports whether input i requires a gradient.
func (s *sink) need(i int) bool {
	return (s.only == nil || s.only[i]) && s.n.inputs[i].requiresGrad
}

// into returns the tensor to accumulate input i's gradient into directly
// (dst += contribution), or nil when the op must deliver through add. It
// is non-nil only for a leaf whose Grad already exists, is contiguous and
// has the leaf's shape. An op that receives a tensor from into must add its
// whole contribution to it, then call settle(i); when overwrite is true,
// dst's contents are not a gradient (Var.SetGradBuffer) and the op writes
// its contribution over them instead.
func (s *sink) into(i int) (dst *tensor.Tensor, overwrite bool) {
	in := s.n.inputs[i]
	if !s.need(i) || in.node != nil || in.Grad == nil {
		return nil, false
	}
	if !in.Grad.IsContiguous() || !in.Grad.SameShape(in.Value) {
		return nil, false
	}
	return in.Grad, in.takeGradBuf()
}

// accumulator returns the gradient input i has gathered so far when the
// op may add its contribution into it in place (then calling settle(i)):
// a node's gradient private to it (owned), contiguous and of the input's
// shape. It returns nil otherwise, and the op delivers through add.
func (s *sink) accumulator(i int) *tensor.Tensor {
	in := s.n.inputs[i]
	if !s.need(i) || in.node == nil {
		return nil
	}
	n := in.node
	if n.grad == nil || !n.owned || !n.grad.IsContiguous() || !n.grad.SameShape(in.Value) {
		return nil
	}
	return n.grad
}

// add delivers g as input i's whole gradient contribution and settles i.
// owned says g is a fresh tensor nothing else references, so the engine may
// keep it instead of copying.
func (s *sink) add(i int, g *tensor.Tensor, owned bool) {
	in := s.n.inputs[i]
	if !s.need(i) {
		if owned {
			tensor.Recycle(g)
		}
		return
	}
	if !owned {
		s.handedOn = true
	}
	defer s.settle(i)
	if !g.SameShape(in.Value) {
		panic(fmt.Sprintf("autograd: %s backward: gradient of shape %v for input %d of shape %v", s.n.op, g.Shape(), i, in.Value.Shape()))
	}
	if in.node == nil {
		accumulateLeaf(in, g, owned)
		return
	}
	n := in.node
	switch {
	case n.grad == nil:
		n.grad, n.owned = g, owned
	case n.owned:
		tensor.AddScaled(n.grad, 1, g)
		if owned {
			tensor.Recycle(g) // summed in: nobody else holds it
		}
	case owned && g.IsContiguous():
		tensor.AddScaled(g, 1, n.grad) // keep the fresh tensor instead of allocating a third
		n.grad, n.owned = g, true
	default:
		n.grad, n.owned = tensor.Add(n.grad, g), true
	}
}

// accumulateLeaf adds g into the leaf's Grad in place, allocating Grad on
// first use.
func accumulateLeaf(v *Var, g *tensor.Tensor, owned bool) {
	switch {
	case v.Grad != nil:
		if !v.Grad.SameShape(v.Value) {
			panic(fmt.Sprintf("autograd: leaf Grad has shape %v, value has shape %v", v.Grad.Shape(), v.Value.Shape()))
		}
		if v.takeGradBuf() {
			v.Grad.CopyFrom(g)
		} else {
			tensor.AddScaled(v.Grad, 1, g)
		}
		if owned {
			tensor.Recycle(g) // copied or summed in: nobody else holds it
		}
	case owned && g.IsContiguous():
		v.Grad = g
	default:
		v.Grad = g.Clone()
	}
}

// engine is the state of one Backward pass.
type engine struct {
	leafPending map[*Var]int
	ready       nodeHeap
	// split, in the input pass of BackwardSplit, holds the weights whose
	// consumers are deferred (into deferred) to the weight pass.
	split    map[*Var]bool
	deferred []deferredNode
	// held is the storage the input pass could not recycle because the
	// weight pass may still read it (outputs and scratch of every node),
	// recycled once the weight pass is done.
	held []*tensor.Tensor
}

// Backward computes the gradient of the scalar (one-element) v with
// respect to every leaf that requires grad and that v depends on, adding it
// into each leaf's Grad in place (see Var).
//
// Ordering and hooks: nodes run in reverse topological order, deepest
// first. Each leaf's OnGradReady hooks run, on the calling goroutine, as
// soon as the last contribution to its gradient has been added, while the
// rest of the graph is still being differentiated; for a feed-forward
// network the last layer's parameters become ready first. Every leaf
// reached gets a Grad, zero if no contribution arrived.
//
// Backward releases the graph's saved tensors as it goes: running Backward
// again through the same graph panics. It panics when v does not require
// grad or has more than one element. Concurrent Backward calls must not
// share leaves or graph nodes.
func Backward(v *Var) {
	if v.Value.Len() != 1 {
		panic(fmt.Sprintf("autograd: Backward of a non-scalar of shape %v; use BackwardGrad", v.Value.Shape()))
	}
	BackwardGrad(v, tensor.FullOn(v.Value.Device(), 1, v.Value.Shape()...))
}

// BackwardGrad is Backward starting from a given gradient of v (same
// shape as v.Value), e.g. one received from the next pipeline stage.
func BackwardGrad(v *Var, grad *tensor.Tensor) {
	if !v.requiresGrad {
		panic("autograd: Backward of a Var that does not require grad")
	}
	if !grad.SameShape(v.Value) {
		panic(fmt.Sprintf("autograd: BackwardGrad: gradient shape %v, value shape %v", grad.Shape(), v.Value.Shape()))
	}
	if v.node == nil {
		accumulateLeaf(v, grad, false)
		fireHooks(v)
		return
	}
	e := &engine{leafPending: map[*Var]int{}}
	e.count(v.node)
	v.node.grad, v.node.owned = grad, false
	heap.Push(&e.ready, v.node)
	for e.ready.Len() > 0 {
		n := heap.Pop(&e.ready).(*node)
		e.run(n)
	}
}

// count walks the graph below root, setting every node's pending count to
// its number of consumers in the graph and every leaf's to its number of
// uses.
func (e *engine) count(root *node) {
	root.pending, root.grad, root.owned = 0, nil, false
	if root.released {
		panic("autograd: Backward through a graph that was already differentiated (" + root.op + ")")
	}
	seen := map[*node]bool{root: true}
	stack := []*node{root}
	for len(stack) > 0 {
		n := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		for _, in := range n.inputs {
			if !in.requiresGrad {
				continue
			}
			if in.node == nil {
				e.leafPending[in]++
				continue
			}
			c := in.node
			if !seen[c] {
				if c.released {
					panic("autograd: Backward through a graph that was already differentiated (" + c.op + ")")
				}
				seen[c] = true
				c.pending, c.grad, c.owned = 0, nil, false
				stack = append(stack, c)
			}
			c.pending++
		}
	}
}

// run differentiates one node whose gradient is complete and settles its
// inputs' dependency counts.
func (e *engine) run(n *node) {
	g := n.grad
	n.grad = nil
	if e.split != nil && e.deferWeights(n, g) {
		return
	}
	s := &sink{e: e, n: n}
	if len(n.inputs) <= len(s.settledBuf) {
		s.settled = s.settledBuf[:len(n.inputs)]
	} else {
		s.settled = make([]bool, len(n.inputs))
	}
	if g != nil {
		n.backward(g, s)
	}
	for i := range n.inputs {
		s.settle(i)
	}
	e.release(n)
	if !s.settleLent() && g != nil && s.gradPrivate() && !s.handedOn {
		// The gradient was the engine's own (summed from consumers or
		// produced fresh by one) and the op kept no reference: its
		// storage serves the next tensor of its size (tensor.Empty), so a
		// steady-state step reuses last step's memory.
		tensor.Recycle(g)
	}
	n.backward, n.inputs, n.released = nil, nil, true
}

// release recycles the storage node n no longer needs once Backward has
// run through it: its output, when transient (every consumer ran before
// this node, as they are deeper, and the caller promised nobody reads the
// value after Backward), and its scratch. In BackwardSplit's input pass
// both are held back until the weight pass is done, since a deferred
// consumer reads its saved inputs again then.
func (e *engine) release(n *node) {
	for _, t := range [2]*tensor.Tensor{n.own, n.scratch} {
		if t == nil || t == n.own && !n.transient {
			continue
		}
		if e.split != nil {
			e.held = append(e.held, t)
		} else {
			tensor.Recycle(t)
		}
	}
	n.own, n.scratch = nil, nil
}

// lend delivers g, the node's incoming gradient itself, as input i's whole
// contribution, while the op goes on reading g until its backward call
// returns (AddLinear's residual: the gradient is g, and the op's own GEMMs
// read g after delivering it). When g is private (gradPrivate), ownership
// passes to the input once the call returns (see settleLent): the input
// may then accumulate into g, and once spent it is recycled, instead of
// being dropped for the collector. Otherwise it is add(i, g, false).
func (s *sink) lend(i int, g *tensor.Tensor) {
	if !s.gradPrivate() || s.only != nil || s.lent != nil {
		s.add(i, g, false)
		return
	}
	handed := s.handedOn
	s.add(i, g, false)
	s.handedOn = handed
	s.lent, s.lentTo = g, i
}

// settleLent runs after the node's backward call: a gradient lent to an
// input whose node still holds it as its gradient (nothing summed into
// it yet) becomes that node's own; one that was summed into another
// tensor, or copied into a leaf's Grad, is spent and recycled. It reports
// whether the node's gradient went that way (and is not to be recycled
// again).
func (s *sink) settleLent() bool {
	g := s.lent
	if g == nil {
		return false
	}
	if s.handedOn {
		return true // handed on otherwise too: it lives on, unowned
	}
	if in := s.n.inputs[s.lentTo].node; in != nil && in.grad == g {
		in.owned = true
	} else {
		tensor.Recycle(g)
	}
	return true
}

// pass delivers t, the node's private gradient (see gradPrivate) or a view
// of it, as input i's whole contribution, with its ownership: the input
// may accumulate into it, and the engine does not recycle it here.
func (s *sink) pass(i int, t *tensor.Tensor) {
	s.handedOn = true
	s.add(i, t, true)
}

// Transient declares that v, the output of an op inside a model, is read
// by nothing but the ops recorded from it: once Backward has run through
// v's node (after all its consumers), the storage of its value may be
// reused for later tensors. It holds for the ops that compute their output
// into storage of their own (Linear and its fused forms, LayerNorm,
// AttentionQKV, Add, GELUTanh, Embedding, and custom ops recorded with
// RecordOwned that say so); for others, and for leaves, it does nothing.
// A container calls it for the intermediate outputs it never returns
// (nn.Sequential, between fused layers). Reading v.Value after Backward is then an error.
func Transient(v *Var) {
	if v != nil && v.node != nil {
		v.node.transient = true
	}
}

// settle records that input i of the sink's node has received its whole
// contribution: the input's pending count drops, and a leaf whose count
// reaches zero runs its hooks right away, even while the rest of this
// node's backward is still to run (a Linear's weight is ready before its
// input gradient is computed). Settling twice is a no-op.
func (s *sink) settle(i int) {
	if s.settled[i] {
		return
	}
	s.settled[i] = true
	in := s.n.inputs[i]
	if !s.need(i) {
		return
	}
	if in.node == nil {
		s.e.leafPending[in]--
		if s.e.leafPending[in] == 0 {
			switch {
			case in.Grad == nil:
				in.Grad = tensor.NewOn(in.Value.Device(), in.Value.Shape()...)
			case in.takeGradBuf(): // reached, but nothing was written
				in.Grad.Zero()
			}
			fireHooks(in)
		}
		return
	}
	c := in.node
	c.pending--
	if c.pending == 0 {
		heap.Push(&s.e.ready, c)
	}
}

func fireHooks(v *Var) {
	if len(v.hooks) == 0 {
		return
	}
	hs := append([]hookEntry(nil), v.hooks...)
	for _, h := range hs {
		h.fn(v)
	}
}

// nodeHeap orders ready nodes deepest first, except that a node on
// leaves alone (depth 1: a mask or view of a parameter) runs as soon as it
// is ready. It delivers only to those leaves, so nothing else waits on it,
// but a leaf's gradient is final, and its hooks fire (a data-parallel
// wrapper launching the leaf's bucket), only once it has run: ordered by
// depth it would wait for the whole backward pass.
type nodeHeap []*node

func (h nodeHeap) Len() int { return len(h) }
func (h nodeHeap) Less(i, j int) bool {
	if a, b := h[i].depth == 1, h[j].depth == 1; a != b {
		return a
	}
	return h[i].depth > h[j].depth
}
func (h nodeHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *nodeHeap) Push(x any)   { *h = append(*h, x.(*node)) }
func (h *nodeHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
