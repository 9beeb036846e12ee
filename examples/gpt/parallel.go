package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/cohortml/cohort/autograd"
	"github.com/cohortml/cohort/datasets"
	"github.com/cohortml/cohort/ddp"
	"github.com/cohortml/cohort/distributed"
	"github.com/cohortml/cohort/layout"
	"github.com/cohortml/cohort/models"
	"github.com/cohortml/cohort/nn"
	"github.com/cohortml/cohort/optim"
	"github.com/cohortml/cohort/tensor"
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

// trainer is one rank's part of the job's model and optimizer. replicated
// (data parallelism through ddp) and staged (any layout through package
// layout) are the two kinds. Every rank calls the same methods in the same
// order: most of them communicate.
type trainer interface {
	// replica returns this rank's data-parallel replica and their number:
	// the rank trains on slice replica of each step's draw.
	replica() (rank, replicas int)
	// forwardBackward runs the forward and backward passes on this
	// replica's batch (token ids x and targets y, row-major [batch,
	// context]) and synchronises the gradients; it returns the loss.
	forwardBackward(ctx context.Context, x, y []int64) (float64, error)
	// update clips the whole model's gradient norm and takes an AdamW step.
	update(ctx context.Context) error
	// valLoss returns the mean cross-entropy over every validation window.
	valLoss(ctx context.Context, c *datasets.ByteCorpus) (float64, error)
	// gather copies the whole model's current weights into full, on
	// every rank (full may be the model the trainer trains).
	gather(ctx context.Context, full *models.GPT) error
	// moments returns AdamW's first and second moments of every
	// parameter, whole, by parameter name, on every rank.
	moments(ctx context.Context) (expAvg, expAvgSq map[string]*tensor.Tensor, err error)
	// setMoments loads whole moments (this rank keeps its shards) and the
	// number of AdamW steps taken.
	setMoments(expAvg, expAvgSq map[string]*tensor.Tensor, steps int64) error
	describe() string
	close() error
}

// newTrainer sets this rank's part of model up for the layout of c (c.dp
// etc. complete): ddp when every rank holds the whole model, layout
// otherwise. Every rank passes a model with the same weights.
func newTrainer(ctx context.Context, c config, pg distributed.ProcessGroup, model *models.GPT) (trainer, error) {
	if c.pp == 1 && c.tp == 1 {
		return newReplicated(ctx, model, pg, c.microbatches)
	}
	return newStaged(ctx, c, pg, model)
}

func newAdamW(params []*autograd.Var) (*optim.Adam, error) {
	return optim.NewAdamW([]optim.Group{{Params: params, LR: lr, WeightDecay: weightDecay}},
		optim.AdamOptions{Beta1: beta1, Beta2: beta2, Eps: eps})
}

// momentsOf returns opt's moment tensors in parameter order (they alias
// the live state).
func momentsOf(opt *optim.Adam, n int) (expAvg, expAvgSq []*tensor.Tensor) {
	sd := opt.StateDict()
	for i := range n {
		expAvg = append(expAvg, sd.Tensors[fmt.Sprintf("state.%d.exp_avg", i)])
		expAvgSq = append(expAvgSq, sd.Tensors[fmt.Sprintf("state.%d.exp_avg_sq", i)])
	}
	return expAvg, expAvgSq
}

// setSteps sets the number of updates AdamW has taken of every parameter.
func setSteps(opt *optim.Adam, steps int64) error {
	sd := opt.StateDict()
	for k := range sd.Scalars {
		if strings.HasPrefix(k, "state.") && strings.HasSuffix(k, ".step") {
			sd.Scalars[k] = float64(steps)
		}
	}
	return opt.LoadStateDict(sd)
}

// replicated is data parallelism: every rank holds the whole model, and
// ddp averages the gradients over the ranks during backward (bucket by
// bucket, overlapped with the layers still computing), so every replica
// takes the same AdamW step.
//
// With microbatches > 1 each replica runs its batch as that many equal
// micro-batches, forward and backward one after another, the gradients
// accumulating (gradient accumulation), and ddp averages them during the
// last backward only. The step is the whole batch's within float32
// rounding; a micro-batch's activations are kept at a time, not the
// whole batch's.
type replicated struct {
	model        *models.GPT
	ddp          *ddp.Model
	pg           distributed.ProcessGroup
	names        []string // parameter names, in optimizer order
	params       []*autograd.Var
	opt          *optim.Adam
	microbatches int
}

// newReplicated copies rank 0's weights to every rank and builds the
// optimizer.
func newReplicated(ctx context.Context, model *models.GPT, pg distributed.ProcessGroup, microbatches int) (*replicated, error) {
	onHost := nn.Parameters(model)[0].Value.Device().IsCPU() // bucket views are host memory
	m, err := ddp.WrapModule(ctx, model, pg, ddp.Options{GradientAsBucketView: onHost})
	if err != nil {
		return nil, err
	}
	r := &replicated{model: model, ddp: m, pg: pg, microbatches: max(microbatches, 1)}
	for _, p := range model.NamedParameters() {
		r.names = append(r.names, p.Name)
		r.params = append(r.params, p.Param)
	}
	if r.opt, err = newAdamW(r.params); err != nil {
		m.Close()
		return nil, err
	}
	return r, nil
}

func (r *replicated) replica() (int, int) { return r.pg.Rank(), r.pg.Size() }

func (r *replicated) describe() string {
	s := fmt.Sprintf("data parallel over %d rank(s) (ddp)", r.pg.Size())
	if r.microbatches > 1 {
		s += fmt.Sprintf(", each batch in %d micro-batches (gradients accumulated)", r.microbatches)
	}
	return s
}

func (r *replicated) forwardBackward(ctx context.Context, x, y []int64) (float64, error) {
	m, n := r.model, r.microbatches
	r.opt.ZeroGrad()
	size := len(x) / n // tokens per micro-batch (config.layout checked that n divides the batch)
	total := 0.0
	for i := range n {
		xi, yi := x[i*size:(i+1)*size], y[i*size:(i+1)*size]
		pass := func() error {
			logits, err := r.ddp.Call(ctx, func() *autograd.Var { return m.Forward(xi, size/m.Config.Ctx, m.Config.Ctx) })
			if err != nil {
				return err
			}
			loss := m.Loss(logits, yi)
			total += float64(loss.Value.To(tensor.CPU).Item())
			if n > 1 {
				// Each micro-batch's mean counts for its share of the batch.
				loss = autograd.Scale(loss, 1/float32(n))
			}
			return r.ddp.Backward(ctx, loss)
		}
		var err error
		if i < n-1 {
			err = r.ddp.NoSync(pass) // the last backward averages the sums
		} else {
			err = pass()
		}
		if err != nil {
			return 0, err
		}
	}
	return total / float64(n), nil
}

func (r *replicated) update(context.Context) error {
	if _, err := optim.ClipGradNorm(r.params, clipNorm, 2); err != nil {
		return err
	}
	r.opt.Step()
	return nil
}

// valLoss evaluates the validation windows in batches of valBatch windows
// as the anchor does; the ranks share the batches (rank r takes batches r,
// r+W, …) and sum the results.
func (r *replicated) valLoss(ctx context.Context, c *datasets.ByteCorpus) (float64, error) {
	m := r.model
	defer nn.NoGrad(m)()
	var x, y []int64
	sum := []float64{0, 0} // cross-entropy, tokens
	for b := r.pg.Rank(); b*valBatch < c.ValWindows(); b += r.pg.Size() {
		x, y = c.ValBatch(b*valBatch, min((b+1)*valBatch, c.ValWindows()), x, y)
		loss := m.Loss(m.Forward(x, len(x)/m.Config.Ctx, m.Config.Ctx), y)
		sum[0] += float64(loss.Value.To(tensor.CPU).Item()) * float64(len(y))
		sum[1] += float64(len(y))
	}
	if r.pg.Size() > 1 {
		if err := r.pg.AllReduce(ctx, distributed.F64(sum), distributed.Sum).Wait(); err != nil {
			return 0, fmt.Errorf("summing the ranks' validation losses: %w", err)
		}
	}
	return sum[0] / sum[1], nil
}

func (r *replicated) gather(_ context.Context, full *models.GPT) error {
	if full == r.model {
		return nil
	}
	return nn.LoadStateDict(full, nn.StateDict(r.model))
}

func (r *replicated) moments(context.Context) (map[string]*tensor.Tensor, map[string]*tensor.Tensor, error) {
	m1, m2 := momentsOf(r.opt, len(r.params))
	expAvg, expAvgSq := map[string]*tensor.Tensor{}, map[string]*tensor.Tensor{}
	for i, name := range r.names {
		expAvg[name], expAvgSq[name] = m1[i], m2[i]
	}
	return expAvg, expAvgSq, nil
}

func (r *replicated) setMoments(expAvg, expAvgSq map[string]*tensor.Tensor, steps int64) error {
	m1, m2 := momentsOf(r.opt, len(r.params))
	for i, name := range r.names {
		a, b := expAvg[name], expAvgSq[name]
		if a == nil || b == nil || !a.SameShape(m1[i]) || !b.SameShape(m2[i]) {
			return fmt.Errorf("AdamW moments of %s: missing or misshapen", name)
		}
	}
	for i, name := range r.names {
		m1[i].CopyFrom(expAvg[name])
		m2[i].CopyFrom(expAvgSq[name])
	}
	return setSteps(r.opt, steps)
}

func (r *replicated) close() error { return r.ddp.Close() }

// staged is any layout with pipeline or tensor parallelism: this rank
// holds its stages' shards of the model (package layout), runs the
// pipeline schedule over the microbatches, and averages the gradients
// over the data-parallel replicas.
type staged struct {
	tr  *layout.Trainer
	opt *optim.Adam
}

func newStaged(ctx context.Context, c config, pg distributed.ProcessGroup, model *models.GPT) (*staged, error) {
	tr, err := layout.Build(ctx, pg, layout.Config{DP: c.dp, PP: c.pp, TP: c.tp, Microbatches: c.microbatches,
		Schedule: c.schedule, Virtual: c.virtual, Recompute: c.recompute, Batch: c.batch, SeqLen: model.Config.Ctx}, model)
	if err != nil {
		return nil, err
	}
	opt, err := newAdamW(tr.Parameters())
	if err != nil {
		tr.Close()
		return nil, err
	}
	return &staged{tr: tr, opt: opt}, nil
}

func (s *staged) replica() (int, int) { return s.tr.DataRank(), s.tr.Config().DP }

func (s *staged) describe() string { return s.tr.Config().String() }

func (s *staged) forwardBackward(ctx context.Context, x, y []int64) (float64, error) {
	return s.tr.Step(ctx, x, y) // zeroes the gradients first
}

func (s *staged) update(ctx context.Context) error {
	if _, err := s.tr.ClipGradNorm(ctx, clipNorm); err != nil {
		return err
	}
	s.opt.Step()
	return nil
}

// valLoss evaluates the validation windows in batches of valBatch windows
// as the anchor does. Every replica evaluates every batch (Eval is
// collective over the whole mesh and averages over the replicas).
func (s *staged) valLoss(ctx context.Context, c *datasets.ByteCorpus) (float64, error) {
	var x, y []int64
	sum, n := 0.0, 0.0
	for lo := 0; lo < c.ValWindows(); lo += valBatch {
		x, y = c.ValBatch(lo, min(lo+valBatch, c.ValWindows()), x, y)
		loss, err := s.tr.Eval(ctx, x, y)
		if err != nil {
			return 0, err
		}
		sum += loss * float64(len(y))
		n += float64(len(y))
	}
	return sum / n, nil
}

func (s *staged) gather(ctx context.Context, full *models.GPT) error {
	return s.tr.GatherInto(ctx, full)
}

func (s *staged) moments(ctx context.Context) (map[string]*tensor.Tensor, map[string]*tensor.Tensor, error) {
	m1, m2 := momentsOf(s.opt, len(s.tr.Parameters()))
	expAvg, err := s.tr.FullStateDictOf(ctx, m1)
	if err != nil {
		return nil, nil, err
	}
	expAvgSq, err := s.tr.FullStateDictOf(ctx, m2)
	if err != nil {
		return nil, nil, err
	}
	return expAvg, expAvgSq, nil
}

func (s *staged) setMoments(expAvg, expAvgSq map[string]*tensor.Tensor, steps int64) error {
	m1, m2 := momentsOf(s.opt, len(s.tr.Parameters()))
	if err := s.tr.LoadFullInto(expAvg, m1); err != nil {
		return err
	}
	if err := s.tr.LoadFullInto(expAvgSq, m2); err != nil {
		return err
	}
	return setSteps(s.opt, steps)
}

func (s *staged) close() error { return s.tr.Close() }
