package layout

import (
	"context"

	"github.com/cohortml/cohort/tensor"
	"github.com/cohortml/cohort/tp"
)

// FullGrads gathers the whole model's gradients by name, as FullStateDict
// gathers the parameters (for the equality tests).
func (t *Trainer) FullGrads(ctx context.Context) (map[string]*tensor.Tensor, error) {
	return t.gather(ctx, func(s tp.Shard) *tensor.Tensor { return s.Param.Grad })
}

// EarlyDP returns how many data-parallel all-reduces were launched while
// the pipeline step still ran.
func (t *Trainer) EarlyDP() int { return t.dpEarly }
