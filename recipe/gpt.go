package recipe

import (
	"github.com/cohortml/cohort/autograd"
	"github.com/cohortml/cohort/optim"
)

// The GPT recipe (gpt_mini.py; gpt_bench.py and zero_bench.py use it
// too): batches of 32 windows per replica, AdamW with these settings on
// every parameter (biases and LayerNorms included), the gradients' global
// norm clipped at ClipNorm before each update, constant learning rate.
const (
	GPTBatch    = 32
	GPTLR       = 3e-4
	Beta1       = 0.9
	Beta2       = 0.95
	Eps         = 1e-8
	WeightDecay = 0.1
	ClipNorm    = 1.0
	ValBatch    = 64 // validation windows per forward pass
)

// NewAdamW returns the GPT recipe's optimizer over params (whole
// parameters or a rank's shards of them).
func NewAdamW(params []*autograd.Var) (*optim.Adam, error) {
	return optim.NewAdamW([]optim.Group{{Params: params, LR: GPTLR, WeightDecay: WeightDecay}},
		optim.AdamOptions{Beta1: Beta1, Beta2: Beta2, Eps: Eps})
}

// Update is the GPT recipe's update once the gradients are final (summed
// or averaged over the ranks): params' global gradient norm clipped at
// ClipNorm, then opt's step.
func Update(params []*autograd.Var, opt optim.Optimizer) error {
	if _, err := optim.ClipGradNorm(params, ClipNorm, 2); err != nil {
		return err
	}
	opt.Step()
	return nil
}
