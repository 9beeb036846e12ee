package main

import (
	"context"
	"fmt"

	"cohort/autograd"
	"cohort/datasets"
	"cohort/dist"
	"cohort/models"
	"cohort/nn"
	"cohort/optim"
	"cohort/tensor"
)

// The anchor's recipe (gpt_mini.py).
const (
	lr          = 3e-4
	beta1       = 0.9
	beta2       = 0.95
	eps         = 1e-8
	weightDecay = 0.1 // on every parameter, biases and LayerNorms included
	clipNorm    = 1.0
	valBatch    = 64 // validation windows per forward pass
)

// trainer is one rank's part of the job's model: it trains on this rank's
// batch and evaluates windows. replicated (data parallelism) is the only
// layout so far; a pipeline stage or a tensor-parallel shard would be
// another.
type trainer interface {
	// step runs one training step on this rank's batch (token ids x and
	// targets y, row-major [batch, context]) in step with the other ranks
	// and returns this rank's mean loss.
	step(ctx context.Context, x, y []int64) (float32, error)
	// lossSum returns the summed cross-entropy over the windows x, y
	// (forward only, no gradients).
	lossSum(ctx context.Context, x, y []int64) (float64, error)
	numParams() int
}

// replicated is data parallelism: every rank holds the whole model, and
// after backward the gradients are averaged over the ranks with one
// all-reduce, so every replica takes the same AdamW step.
//
// TODO(ddp): the gradient all-reduce is done by hand here because ddp.Wrap
// takes an nn.Layer and GPT's forward takes token ids; once ddp accepts
// any module, wrap the model instead (its bucketed all-reduce overlaps
// backward).
type replicated struct {
	model  *models.GPT
	pg     dist.ProcessGroup
	params []*autograd.Var
	grads  []float32 // every parameter's Grad is a view into grads
	opt    optim.Optimizer
}

// newReplicated copies rank 0's initial weights to every rank and builds
// the optimizer.
func newReplicated(ctx context.Context, model *models.GPT, pg dist.ProcessGroup) (*replicated, error) {
	r := &replicated{model: model, pg: pg, params: nn.Parameters(model)}
	n := 0
	for _, p := range r.params {
		n += p.Value.Len()
	}
	r.grads = make([]float32, n)
	flat := make([]float32, n)
	off := 0
	for _, p := range r.params {
		k := p.Value.Len()
		copy(flat[off:off+k], p.Value.Data())
		p.Grad = tensor.FromSlice(r.grads[off:off+k:off+k], p.Value.Shape()...)
		off += k
	}
	if pg.Size() > 1 {
		if err := pg.Broadcast(ctx, dist.F32(flat), 0).Wait(); err != nil {
			return nil, fmt.Errorf("broadcasting rank 0's initial weights: %w", err)
		}
		off = 0
		for _, p := range r.params {
			off += copy(p.Value.Data(), flat[off:])
		}
	}
	opt, err := optim.NewAdamW([]optim.Group{{Params: r.params, LR: lr, WeightDecay: weightDecay}},
		optim.AdamOptions{Beta1: beta1, Beta2: beta2, Eps: eps})
	if err != nil {
		return nil, err
	}
	r.opt = opt
	return r, nil
}

func (r *replicated) numParams() int { return len(r.grads) }

func (r *replicated) step(ctx context.Context, x, y []int64) (float32, error) {
	m := r.model
	r.opt.ZeroGrad()
	loss := m.Loss(m.Forward(x, len(x)/m.Config.Ctx, m.Config.Ctx), y)
	autograd.Backward(loss)
	if r.pg.Size() > 1 {
		if err := r.pg.AllReduce(ctx, dist.F32(r.grads), dist.Avg).Wait(); err != nil {
			return 0, fmt.Errorf("gradient all-reduce: %w", err)
		}
	}
	if _, err := optim.ClipGradNorm(r.params, clipNorm, 2); err != nil {
		return 0, err
	}
	r.opt.Step()
	return loss.Value.Item(), nil
}

func (r *replicated) lossSum(_ context.Context, x, y []int64) (float64, error) {
	m := r.model
	defer nn.NoGrad(m)()
	loss := m.Loss(m.Forward(x, len(x)/m.Config.Ctx, m.Config.Ctx), y)
	return float64(loss.Value.Item()) * float64(len(y)), nil
}

// valLoss returns the mean cross-entropy over every validation window,
// evaluated in batches of valBatch windows as the anchor does; the ranks
// share the batches (rank r takes batches r, r+W, …) and sum the results.
func valLoss(ctx context.Context, tr trainer, pg dist.ProcessGroup, c *datasets.ByteCorpus) (float64, error) {
	var x, y []int64
	sum := []float64{0, 0} // cross-entropy, tokens
	for b := pg.Rank(); b*valBatch < c.ValWindows(); b += pg.Size() {
		x, y = c.ValBatch(b*valBatch, min((b+1)*valBatch, c.ValWindows()), x, y)
		s, err := tr.lossSum(ctx, x, y)
		if err != nil {
			return 0, err
		}
		sum[0] += s
		sum[1] += float64(len(y))
	}
	if pg.Size() > 1 {
		if err := pg.AllReduce(ctx, dist.F64(sum), dist.Sum).Wait(); err != nil {
			return 0, fmt.Errorf("summing the ranks' losses: %w", err)
		}
	}
	return sum[0] / sum[1], nil
}

// meanOverRanks averages v element-wise over the ranks.
func meanOverRanks(ctx context.Context, pg dist.ProcessGroup, v []float64) ([]float64, error) {
	if pg.Size() == 1 {
		return v, nil
	}
	if err := pg.AllReduce(ctx, dist.F64(v), dist.Avg).Wait(); err != nil {
		return nil, fmt.Errorf("averaging the loss over the ranks: %w", err)
	}
	return v, nil
}
