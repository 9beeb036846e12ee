package autograd

import (
	"container/heap"
	"fmt"

	"github.com/cohortml/cohort/tensor"
)

// deferredNode is a node whose weight gradients BackwardSplit's weight
// pass computes, with the gradient of its output.
type deferredNode struct {
	n *node
	g *tensor.Tensor
	// private: g is the engine's own and the input pass handed no view
	// of it on, so it is recycled after the weight pass unless that pass
	// hands it on.
	private bool
}

// BackwardSplit is BackwardGrad in two passes, for zero-bubble pipeline
// schedules (Qi et al., ICLR 2024). The input pass, run now, computes the
// gradient of every leaf below v except the given weights: everything
// upstream waits for these (a pipeline stage's input gradient). It
// returns the weight pass, which computes the weights' gradients and adds
// them into their Grad, firing their OnGradReady hooks; call it exactly
// once, later.
//
// The split is real, not a deferred copy: in the input pass every op that
// consumes a weight runs its backward for its other inputs only (Linear and
// MatMul skip the weight's GEMM; an op whose inputs needing gradients are
// all weights, like Embedding, does not run at all), and keeps its saved
// tensors and output gradient for the weight pass, which runs it again for
// the weights only. LayerNorm, whose gradients come out of one pass over
// the rows, computes them all in the input pass and hands the weights'
// part on in the weight pass; ops made with Record do their whole work in
// both passes. grad must not be modified until the weight pass has run.
//
// Storage is recycled as in Backward: gradients as soon as they are
// spent, outputs and saved scratch once the weight pass is done.
//
// Between the passes the graph cannot be differentiated again (as after
// Backward). Weights that do not require grad, or that v does not depend
// on, are ignored.
func BackwardSplit(v *Var, grad *tensor.Tensor, weights []*Var) (weightPass func()) {
	if !v.requiresGrad {
		panic("autograd: BackwardSplit of a Var that does not require grad")
	}
	if !grad.SameShape(v.Value) {
		panic(fmt.Sprintf("autograd: BackwardSplit: gradient shape %v, value shape %v", grad.Shape(), v.Value.Shape()))
	}
	split := map[*Var]bool{}
	for _, w := range weights {
		if w.IsLeaf() && w.requiresGrad {
			split[w] = true
		}
	}
	if v.node == nil {
		if split[v] {
			return func() { BackwardGrad(v, grad) }
		}
		BackwardGrad(v, grad)
		return func() {}
	}
	for w := range split {
		w.requiresGrad = false
	}
	e := &engine{leafPending: map[*Var]int{}, split: split}
	func() {
		defer func() {
			for w := range split {
				w.requiresGrad = true
			}
		}()
		e.count(v.node)
		v.node.grad, v.node.owned = grad, false
		heap.Push(&e.ready, v.node)
		for e.ready.Len() > 0 {
			e.run(heap.Pop(&e.ready).(*node))
		}
	}()
	done := false
	return func() {
		if done {
			panic("autograd: BackwardSplit's weight pass run twice")
		}
		done = true
		e.weightPass()
	}
}

// newSink returns the sink of one run of n's backward.
func newSink(e *engine, n *node) *sink {
	s := &sink{e: e, n: n}
	if len(n.inputs) <= len(s.settledBuf) {
		s.settled = s.settledBuf[:len(n.inputs)]
	} else {
		s.settled = make([]bool, len(n.inputs))
	}
	return s
}

// deferWeights handles, in the input pass, a node that consumes a weight: it
// runs the node's backward for the other inputs (if any needs a gradient)
// and keeps the node and its output gradient for the weight pass. It
// reports whether n consumes a weight.
func (e *engine) deferWeights(n *node, g *tensor.Tensor) bool {
	uses, others := false, false
	for _, in := range n.inputs {
		if e.split[in] {
			uses = true
		} else if in.requiresGrad {
			others = true
		}
	}
	if !uses {
		return false
	}
	s := newSink(e, n)
	s.keep = true
	if g != nil && others {
		n.backward(g, s)
	}
	for i := range n.inputs {
		s.settle(i)
	}
	n.released = true // no second Backward; backward and inputs stay for the weight pass
	if g != nil {
		e.deferred = append(e.deferred, deferredNode{n, g, n.owned && !s.handedOn})
	} else {
		n.backward, n.inputs = nil, nil
	}
	e.release(n) // held until the weight pass is done
	return true
}

// weightPass runs the deferred nodes for their weight inputs only.
func (e *engine) weightPass() {
	e.leafPending = map[*Var]int{}
	for _, d := range e.deferred {
		for _, in := range d.n.inputs {
			if e.split[in] && in.requiresGrad {
				e.leafPending[in]++
			}
		}
	}
	for _, d := range e.deferred {
		s := newSink(e, d.n)
		s.only = make([]bool, len(d.n.inputs))
		s.spent = d.private
		for i, in := range d.n.inputs {
			s.only[i] = e.split[in]
		}
		d.n.backward(d.g, s)
		for i := range d.n.inputs {
			s.settle(i)
		}
		d.n.backward, d.n.inputs = nil, nil
		if d.private && !s.handedOn {
			tensor.Recycle(d.g)
		}
	}
	e.deferred = nil
	for _, t := range e.held {
		tensor.Recycle(t)
	}
	e.held = nil
}
