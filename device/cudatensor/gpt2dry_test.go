package cudatensor

import (
	"math/rand/v2"
	"testing"

	"github.com/cohortml/cohort/autograd"
	"github.com/cohortml/cohort/models"
	"github.com/cohortml/cohort/nn"
)

// TestGPT2RunsDry takes two training steps of GPT-2 124M (batch 2 × 1024)
// on the dry device: every launch's geometry at GPT-2's sizes (LayerNorm
// width 768, head dimension 64, the 50257-way classifier, T = 1024) comes
// from the kernel table without exceeding a limit.
func TestGPT2RunsDry(t *testing.T) {
	if testing.Short() {
		t.Skip("skipped in -short: builds GPT-2's 124M parameters on the host")
	}
	const B, T = 2, 1024
	rng := rand.New(rand.NewPCG(5, 6))
	ids, next := make([]int64, B*T), make([]int64, B*T)
	for i := range ids {
		ids[i], next[i] = int64(rng.IntN(50257)), int64(rng.IntN(50257))
	}
	dryStep(t, func(r *rand.Rand) (nn.Module, func() *autograd.Var) {
		g, err := models.NewGPT(r, models.GPT2())
		if err != nil {
			t.Fatal(err)
		}
		return g, func() *autograd.Var { return g.Loss(g.Forward(ids, B, T), next) }
	}, 1)
}
