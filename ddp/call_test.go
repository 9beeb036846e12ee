package ddp

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/cohortml/cohort/autograd"
	"github.com/cohortml/cohort/distributed"
	"github.com/cohortml/cohort/models"
	"github.com/cohortml/cohort/nn"
)

// TestPlainAutogradBackward: after Call, plain autograd.Backward leaves
// the same averaged gradients as Model.Backward (the step completes in
// the last gradient hook), in both gradient modes.
func TestPlainAutogradBackward(t *testing.T) {
	for _, view := range []bool{false, true} {
		for _, world := range []int{1, 3} {
			t.Run(fmt.Sprintf("view=%v/world=%d", view, world), func(t *testing.T) {
				o := func() Options {
					return Options{GradientAsBucketView: view, FirstBucketCapBytes: 256, BucketCapBytes: 512}
				}
				want := gradsAfterOneStep(t, world, o)
				data := newDataset(6, 100, 5, 12)
				errs := runDist(t, world, func(pg distributed.ProcessGroup) error {
					ctx := context.Background()
					net, m, err := wrapMLP(ctx, pg, o())
					if err != nil {
						return err
					}
					for step := range 2 { // the second step runs on the rebuilt buckets
						x, y := data.batch(pg.Rank()*4, pg.Rank()*4+4)
						out, err := m.Call(ctx, func() *autograd.Var { return net.Forward(x) })
						if err != nil {
							return err
						}
						autograd.Backward(loss(out, y))
						for i, np := range net.NamedParameters() {
							for j, g := range np.Param.Grad.Data() {
								w := want[pg.Rank()][i][j] * float32(step+1) // gradients accumulate: not zeroed
								if math.Abs(float64(g-w)) > 1e-6+1e-5*math.Abs(float64(w)) {
									return fmt.Errorf("step %d: %s[%d] = %v, want %v", step, np.Name, j, g, w)
								}
							}
						}
					}
					return nil
				})
				for r, err := range errs {
					if err != nil {
						t.Errorf("rank %d: %v", r, err)
					}
				}
			})
		}
	}
}

// TestWrapModuleGPT: a module whose forward takes token ids is wrapped
// with WrapModule and driven with Call; Forward names the problem.
func TestWrapModuleGPT(t *testing.T) {
	errs := runDist(t, 2, func(pg distributed.ProcessGroup) error {
		ctx := context.Background()
		cfg := models.GPTConfig{Vocab: 16, Ctx: 8, NLayer: 1, D: 16, NHead: 2}
		g, err := models.NewGPT(rand.New(rand.NewPCG(1, 2)), cfg)
		if err != nil {
			return err
		}
		m, err := WrapModule(ctx, g, pg, Options{})
		if err != nil {
			return err
		}
		if _, err := m.Forward(ctx, nil); err == nil || !strings.Contains(err.Error(), "use Call") {
			return fmt.Errorf("Forward on a GPT: err = %v, want one saying to use Call", err)
		}
		idx := []int64{1, 2, 3, 4, 5, 6}
		if pg.Rank() == 1 {
			idx = []int64{7, 8, 9, 10, 11, 12}
		}
		out, err := m.Call(ctx, func() *autograd.Var { return g.Forward(idx[:5], 1, 5) })
		if err != nil {
			return err
		}
		if err := m.Backward(ctx, g.Loss(out, idx[1:])); err != nil {
			return err
		}
		for _, p := range nn.Parameters(m) {
			if p.Grad == nil {
				return fmt.Errorf("a parameter has no gradient")
			}
		}
		return m.VerifyReplicas(ctx)
	})
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}
