package layout_test

import (
	"context"
	"testing"

	"github.com/cohortml/cohort/distributed"
	"github.com/cohortml/cohort/internal/dp/dptest"
	"github.com/cohortml/cohort/layout"
	"github.com/cohortml/cohort/models"
	"github.com/cohortml/cohort/optim"
	"github.com/cohortml/cohort/tensor"
)

// dpTrainer adapts a Trainer of the dp dimension alone, and the optimizer
// over its parameters, to the conformance suite.
type dpTrainer struct {
	*layout.Trainer
	opt optim.Optimizer
}

func (d dpTrainer) TrainStep(ctx context.Context, idx, tgt []int64, _, _ int) error {
	_, err := d.Trainer.Step(ctx, idx, tgt)
	return err
}

func (d dpTrainer) ClipGradNorm(ctx context.Context, maxNorm float64) (float64, error) {
	return d.Trainer.ClipGradNorm(ctx, maxNorm)
}

func (d dpTrainer) Step(context.Context) error {
	d.opt.Step()
	return nil
}

func (d dpTrainer) FullState(ctx context.Context) (map[string]*tensor.Tensor, error) {
	return d.FullStateDict(ctx)
}

func (d dpTrainer) LoadFull(_ context.Context, sd map[string]*tensor.Tensor) error {
	return d.Trainer.LoadFull(sd)
}

// TestConformance runs the data-parallel suite's GPT cases on layout's
// dp dimension (DP = world, no pipeline or tensor parallelism).
func TestConformance(t *testing.T) {
	dptest.Run(t, dptest.Wrapper{Name: "layout-dp",
		WrapGPT: func(ctx context.Context, g *models.GPT, pg distributed.ProcessGroup, B, T int, o dptest.Options) (dptest.StepModel, error) {
			tr, err := layout.Build(ctx, pg, layout.Config{DP: pg.Size(), Batch: B, SeqLen: T}, g)
			if err != nil {
				return nil, err
			}
			opt, err := o.Optimizer(tr.Parameters())
			if err != nil {
				tr.Close()
				return nil, err
			}
			return dpTrainer{tr, opt}, nil
		}})
}
