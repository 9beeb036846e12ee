package optim

import "github.com/cohortml/cohort/tensor"

// Moments returns Adam's first and second moments of every parameter, in
// parameter order, shaped as the parameters. They alias the live state:
// copying into them (a checkpoint's values) sets the state, and later
// steps change them (copy them for a snapshot).
func (a *Adam) Moments() (expAvg, expAvgSq []*tensor.Tensor) {
	for i, p := range a.params {
		if a.devState != nil && a.devState[i] != nil {
			expAvg = append(expAvg, a.devState[i].expAvg)
			expAvgSq = append(expAvgSq, a.devState[i].expAvgSq)
			continue
		}
		shape := p.Value.Shape()
		expAvg = append(expAvg, tensor.FromSlice(a.state[i].ExpAvg, shape...))
		expAvgSq = append(expAvgSq, tensor.FromSlice(a.state[i].ExpAvgSq, shape...))
	}
	return expAvg, expAvgSq
}

// SetSteps sets the number of updates taken of every parameter to n (the
// step a checkpoint was saved at), which the next update's bias
// corrections count from. It panics when n < 0.
func (a *Adam) SetSteps(n int64) {
	if n < 0 {
		panic("optim: Adam.SetSteps: negative step count")
	}
	for i := range a.steps {
		a.steps[i] = n
	}
}
