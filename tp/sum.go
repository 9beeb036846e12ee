package tp

import (
	"fmt"
	"slices"

	"github.com/cohortml/cohort/autograd"
	"github.com/cohortml/cohort/tensor"
)

// sumInto returns base + terms[0] + terms[1] + …, summed left to right
// into base's storage: ((base + t0) + t1)…, each term broadcast to base's
// shape, with the rounding of the same chain of autograd.Add. base must
// be the fresh contiguous output of an op that nothing else reads and
// that is not marked Transient (a product, an all-reduce's output): the
// sum takes its storage over, and autograd.Transient applies to the sum.
//
// It is the bias add and the residual add of the row-parallel layers
// and the position add of the embedding, without a tensor each. Backward
// hands each input its gradient with its ownership: the incoming gradient
// itself to base when it is private (a copy to every other input of its
// shape, which a chain of Adds would have shared unowned, so that each
// path recycles or updates its own), the sum over the broadcast
// dimensions to a broadcast term.
func sumInto(op string, base *autograd.Var, terms ...*autograd.Var) *autograd.Var {
	y := base.Value
	if !y.IsContiguous() {
		panic(fmt.Sprintf("tp: %s: base of shape %v is not contiguous", op, y.Shape()))
	}
	for _, t := range terms {
		tensor.AddInto(y, y, t.Value)
	}
	inputs := append([]*autograd.Var{base}, terms...)
	return autograd.RecordOwned(op, y, true, inputs, func(g *tensor.Tensor, private bool) []autograd.InputGrad {
		gs := make([]autograd.InputGrad, len(inputs))
		handed := false // g itself went to an input, with its ownership
		for i, in := range inputs {
			switch {
			case !in.RequiresGrad():
			case !slices.Equal(in.Value.Shape(), g.Shape()):
				gs[i] = autograd.InputGrad{T: tensor.SumTo(g, in.Value.Shape()...), Owned: true}
			case !private:
				gs[i] = autograd.InputGrad{T: g}
			case !handed:
				gs[i], handed = autograd.InputGrad{T: g, Owned: true}, true
			default:
				gs[i] = autograd.InputGrad{T: clone(g), Owned: true}
			}
		}
		return gs
	})
}
