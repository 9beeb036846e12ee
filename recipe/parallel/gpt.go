package parallel

import (
	"context"
	"fmt"

	"github.com/cohortml/cohort/autograd"
	"github.com/cohortml/cohort/datasets"
	"github.com/cohortml/cohort/ddp"
	"github.com/cohortml/cohort/distributed"
	"github.com/cohortml/cohort/layout"
	"github.com/cohortml/cohort/models"
	"github.com/cohortml/cohort/nn"
	"github.com/cohortml/cohort/optim"
	"github.com/cohortml/cohort/recipe"
	"github.com/cohortml/cohort/tensor"
)

// GPT is one rank's part of a GPT model under a layout: replicated (ddp,
// when PP = TP = 1) or staged (package layout). Exactly one of ddp and
// staged is set.
//
// Replicated with Microbatches > 1, each replica runs its batch as that
// many equal micro-batches, forward and backward one after another, the
// gradients accumulating, and ddp averages them during the last backward
// only: the whole batch's step within float32 rounding, with a
// micro-batch's activations in memory at a time.
type GPT struct {
	model  *models.GPT // the whole model (replicated)
	pg     distributed.ProcessGroup
	cfg    layout.Config
	ddp    *ddp.Model
	staged *layout.Trainer
	names  []string // parameter names, in Parameters' order (replicated)
	params []*autograd.Var
}

// NewGPT sets this rank's part of model up for cfg (every size set; see
// layout.Config): every rank passes a model with the same weights. ddp
// copies rank 0's weights to every rank; layout keeps each rank's shards.
func NewGPT(ctx context.Context, pg distributed.ProcessGroup, model *models.GPT, cfg layout.Config) (*GPT, error) {
	g := &GPT{model: model, pg: pg, cfg: cfg}
	if cfg.PP > 1 || cfg.TP > 1 {
		tr, err := layout.Build(ctx, pg, cfg, model)
		if err != nil {
			return nil, err
		}
		g.staged, g.params = tr, tr.Parameters()
		return g, nil
	}
	onHost := nn.Parameters(model)[0].Value.Device().IsCPU() // bucket views are host memory
	m, err := ddp.WrapModule(ctx, model, pg, ddp.Options{GradientAsBucketView: onHost})
	if err != nil {
		return nil, err
	}
	g.ddp = m
	g.cfg.Microbatches = max(cfg.Microbatches, 1)
	for _, p := range model.NamedParameters() {
		g.names = append(g.names, p.Name)
		g.params = append(g.params, p.Param)
	}
	return g, nil
}

// Parameters returns this rank's parameters (or shards of them), the
// ones its optimizer updates.
func (g *GPT) Parameters() []*autograd.Var { return g.params }

// Replica returns this rank's data-parallel replica and their number: the
// rank trains on slice replica of each step's draw.
func (g *GPT) Replica() (replica, replicas int) {
	if g.staged != nil {
		return g.staged.DataRank(), g.cfg.DP
	}
	return g.pg.Rank(), g.pg.Size()
}

func (g *GPT) String() string {
	if g.staged != nil {
		return g.staged.Config().String()
	}
	s := fmt.Sprintf("data parallel over %d rank(s) (ddp)", g.pg.Size())
	if n := g.cfg.Microbatches; n > 1 {
		s += fmt.Sprintf(", each batch in %d micro-batches (gradients accumulated)", n)
	}
	return s
}

// ForwardBackward runs the forward and backward passes on this replica's
// batch (token ids x and targets y, row-major [batch, context]) and
// synchronises the gradients; it returns the loss. The gradients must be
// zero before (the optimizer's ZeroGrad after each update).
func (g *GPT) ForwardBackward(ctx context.Context, x, y []int64) (float64, error) {
	if g.staged != nil {
		return g.staged.Step(ctx, x, y) // zeroes the gradients first
	}
	m, n := g.model, g.cfg.Microbatches
	size := len(x) / n // tokens per micro-batch
	total := 0.0
	for i := range n {
		xi, yi := x[i*size:(i+1)*size], y[i*size:(i+1)*size]
		pass := func() error {
			logits, err := g.ddp.Call(ctx, func() *autograd.Var { return m.Forward(xi, size/m.Config.Ctx, m.Config.Ctx) })
			if err != nil {
				return err
			}
			loss := m.Loss(logits, yi)
			total += float64(loss.Value.To(tensor.CPU).Item())
			if n > 1 { // each micro-batch's mean counts for its share of the batch
				loss = autograd.Scale(loss, 1/float32(n))
			}
			return g.ddp.Backward(ctx, loss)
		}
		var err error
		if i < n-1 {
			err = g.ddp.NoSync(pass) // the last backward averages the sums
		} else {
			err = pass()
		}
		if err != nil {
			return 0, err
		}
	}
	return total / float64(n), nil
}

// ClipGradNorm clips the whole model's gradient norm (over every shard)
// at maxNorm and returns the norm before clipping.
func (g *GPT) ClipGradNorm(ctx context.Context, maxNorm float64) (float64, error) {
	if g.staged != nil {
		return g.staged.ClipGradNorm(ctx, maxNorm)
	}
	return optim.ClipGradNorm(g.params, maxNorm, 2)
}

// ValLoss returns the mean cross-entropy over every validation window of
// c, in batches of recipe.ValBatch windows as the anchor evaluates.
// Replicated, the ranks share the batches (rank r takes batches r, r+W,
// …) and sum the results; staged, every replica evaluates every batch
// (layout's Eval is collective over the mesh).
func (g *GPT) ValLoss(ctx context.Context, c *datasets.ByteCorpus) (float64, error) {
	from, stride := g.pg.Rank(), g.pg.Size()
	if g.staged != nil {
		from, stride = 0, 1
	} else {
		defer nn.NoGrad(g.model)()
	}
	var x, y []int64
	sum := []float64{0, 0} // cross-entropy, tokens
	for b := from; b*recipe.ValBatch < c.ValWindows(); b += stride {
		x, y = c.ValBatch(b*recipe.ValBatch, min((b+1)*recipe.ValBatch, c.ValWindows()), x, y)
		var loss float64
		if g.staged != nil {
			var err error
			if loss, err = g.staged.Eval(ctx, x, y); err != nil {
				return 0, err
			}
		} else {
			m := g.model
			loss = float64(m.Loss(m.Forward(x, len(x)/m.Config.Ctx, m.Config.Ctx), y).Value.To(tensor.CPU).Item())
		}
		sum[0] += loss * float64(len(y))
		sum[1] += float64(len(y))
	}
	if stride > 1 {
		if err := g.pg.AllReduce(ctx, distributed.F64(sum), distributed.Sum).Wait(); err != nil {
			return 0, fmt.Errorf("parallel: summing the ranks' validation losses: %w", err)
		}
	}
	return sum[0] / sum[1], nil
}

// GatherInto copies the whole model's current weights into full, on
// every rank (full may be the model NewGPT was given).
func (g *GPT) GatherInto(ctx context.Context, full *models.GPT) error {
	if g.staged != nil {
		return g.staged.GatherInto(ctx, full)
	}
	if full == g.model {
		return nil
	}
	return nn.LoadStateDict(full, nn.StateDict(g.model))
}

// StateOf returns tensors shaped like Parameters() (vals[i] belongs to
// Parameters()[i]: an optimizer's moments, say) whole, by parameter
// name, on every rank.
func (g *GPT) StateOf(ctx context.Context, vals []*tensor.Tensor) (map[string]*tensor.Tensor, error) {
	if g.staged != nil {
		return g.staged.FullStateDictOf(ctx, vals)
	}
	if len(vals) != len(g.names) {
		return nil, fmt.Errorf("parallel: StateOf: %d tensors for %d parameters", len(vals), len(g.names))
	}
	sd := make(map[string]*tensor.Tensor, len(vals))
	for i, name := range g.names {
		sd[name] = vals[i]
	}
	return sd, nil
}

// LoadStateInto copies this rank's part of the whole tensors in sd (by
// parameter name, as StateOf returns them) into vals, shaped like
// Parameters(). It checks every tensor before copying any.
func (g *GPT) LoadStateInto(sd map[string]*tensor.Tensor, vals []*tensor.Tensor) error {
	if g.staged != nil {
		return g.staged.LoadFullInto(sd, vals)
	}
	if len(vals) != len(g.names) {
		return fmt.Errorf("parallel: LoadStateInto: %d tensors for %d parameters", len(vals), len(g.names))
	}
	for i, name := range g.names {
		if v := sd[name]; v == nil || !v.SameShape(vals[i]) {
			return fmt.Errorf("parallel: LoadStateInto: %s missing or misshapen", name)
		}
	}
	for i, name := range g.names {
		vals[i].CopyFrom(sd[name])
	}
	return nil
}

// Close releases the wrapper (ddp's or layout's); it does not close pg.
func (g *GPT) Close() error {
	if g.staged != nil {
		return g.staged.Close()
	}
	return g.ddp.Close()
}
