package optim_test

import (
	"fmt"

	"github.com/cohortml/cohort/autograd"
	"github.com/cohortml/cohort/optim"
	"github.com/cohortml/cohort/tensor"
)

// A training loop's optimizer half: AdamW with decay on the weight but not
// the bias, linear warm-up then cosine decay, and gradient clipping. The
// loss is (w − 3)² + (b + 1)², whose gradient is written out by hand here.
func Example() {
	w := autograd.NewVar(tensor.FromSlice([]float32{0}, 1), true)
	b := autograd.NewVar(tensor.FromSlice([]float32{0}, 1), true)
	w.Grad, b.Grad = tensor.New(1), tensor.New(1)

	opt, err := optim.NewAdamW([]optim.Group{
		{Params: []*autograd.Var{w}, LR: 0.1, WeightDecay: 0.01},
		{Params: []*autograd.Var{b}, LR: 0.1},
	}, optim.AdamDefaults())
	if err != nil {
		panic(err)
	}
	sched, err := optim.NewScheduler(opt, optim.Sequential{
		Schedules:  []optim.Schedule{optim.LinearLR{StartFactor: 0.1, EndFactor: 1, TotalIters: 10}, optim.CosineAnnealingLR{TMax: 290}},
		Milestones: []int{10},
	})
	if err != nil {
		panic(err)
	}
	for range 300 {
		opt.ZeroGrad()
		w.Grad.Data()[0] = 2 * (w.Value.Data()[0] - 3) // stands in for Backward
		b.Grad.Data()[0] = 2 * (b.Value.Data()[0] + 1)
		if _, err := optim.ClipGradNorm([]*autograd.Var{w, b}, 1.0, 2); err != nil {
			panic(err) // a NaN or Inf gradient: skip the step in real code
		}
		opt.Step()
		sched.Step()
	}
	fmt.Printf("w = %.2f, b = %.2f, final lr = %.4f\n", w.Value.Data()[0], b.Value.Data()[0], opt.LR(0))
	// Output: w = 2.99, b = -1.00, final lr = 0.0000
}
