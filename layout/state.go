package layout

import (
	"context"
	"fmt"

	"github.com/cohortml/cohort/autograd"
	"github.com/cohortml/cohort/distributed"
	"github.com/cohortml/cohort/models"
	"github.com/cohortml/cohort/nn"
	"github.com/cohortml/cohort/tensor"
	"github.com/cohortml/cohort/tp"
)

// FullStateDict gathers the whole model's parameters, named as
// models.GPT's, onto every rank: each stage's shards are all-gathered over
// tp, then the stages are summed over pp (every parameter is contributed
// by exactly one pipeline rank, the others adding zeros, so the values are
// exact). It is a collective op of the mesh; data-parallel replicas hold
// the same values and do not communicate.
func (t *Trainer) FullStateDict(ctx context.Context) (map[string]*tensor.Tensor, error) {
	if t.err != nil {
		return nil, t.err
	}
	return t.gather(ctx, func(s tp.Shard) *tensor.Tensor { return s.Param.Value })
}

// GatherInto copies the whole model's parameters into full, a models.GPT
// of the same config (to evaluate or save it in one process). It is a
// collective op of the mesh.
func (t *Trainer) GatherInto(ctx context.Context, full *models.GPT) error {
	if full.Config != t.model {
		return fmt.Errorf("layout: GatherInto: model config %+v, want %+v", full.Config, t.model)
	}
	sd, err := t.FullStateDict(ctx)
	if err != nil {
		return err
	}
	if err := nn.LoadStateDict(full, sd); err != nil {
		return fmt.Errorf("layout: GatherInto: %w", err)
	}
	return nil
}

// LoadFull copies this rank's shards of the full parameters in sd (named as
// models.GPT's, e.g. nn.StateDict of a models.GPT or a FullStateDict) into
// its stages. It checks every tensor before copying any and needs no
// communication.
func (t *Trainer) LoadFull(sd map[string]*tensor.Tensor) error {
	if err := tp.LoadFull(t.comm, t.shards, sd); err != nil {
		return fmt.Errorf("layout: rank %d: %w", t.mesh.Rank(), err)
	}
	return nil
}

// gather returns the full tensors of(s) of every parameter of the model,
// by name (see FullStateDict).
func (t *Trainer) gather(ctx context.Context, of func(tp.Shard) *tensor.Tensor) (map[string]*tensor.Tensor, error) {
	var mine []tp.Shard
	for i, s := range t.shards {
		if t.counted[i] {
			v := of(s)
			if v == nil {
				v = tensor.New(s.Param.Value.Shape()...)
			}
			mine = append(mine, tp.Shard{Name: s.Name, Param: autograd.NewVar(v, false), Placement: s.Placement})
		}
	}
	local, err := tp.FullStateDict(ctx, t.comm, mine)
	if err != nil {
		return nil, fmt.Errorf("layout: rank %d: %w", t.mesh.Rank(), err)
	}
	if t.cfg.PP == 1 {
		return local, nil
	}
	// One flat buffer: every parameter in model order, then a count of the
	// pipeline ranks that contributed it (one, by construction).
	off := map[string]int{}
	n := 0
	for _, name := range t.names {
		off[name] = n
		n += numel(t.shape[name])
	}
	flat := make([]float32, n+len(t.names))
	for i, name := range t.names {
		if v, ok := local[name]; ok {
			copy(flat[off[name]:], v.Contiguous().Data())
			flat[n+i] = 1
		}
	}
	if err := wait(ctx, t.mesh.Group("pp").AllReduce(ctx, distributed.F32(flat), distributed.Sum)); err != nil {
		return nil, t.fail(fmt.Errorf("layout: rank %d: gathering the model over pp: %w", t.mesh.Rank(), err))
	}
	out := make(map[string]*tensor.Tensor, len(t.names))
	for i, name := range t.names {
		if c := flat[n+i]; c != 1 {
			return nil, fmt.Errorf("layout: gathering the model: parameter %s held by %v pipeline ranks, want 1", name, c)
		}
		k := numel(t.shape[name])
		out[name] = tensor.FromSlice(append([]float32(nil), flat[off[name]:off[name]+k]...), t.shape[name]...)
	}
	return out, nil
}

func numel(shape []int) int {
	n := 1
	for _, d := range shape {
		n *= d
	}
	return n
}

// Eval returns the mean loss of the model on this replica's batch (idx and
// targets: B·SeqLen ids for any B ≥ 1, passed on every rank of the
// replica, which takes B from their length), averaged over the
// data-parallel replicas, on every rank. It
// runs the stages' forward passes one after another as one microbatch,
// without recording a graph, and leaves the gradients alone. It is a
// collective op of the mesh.
func (t *Trainer) Eval(ctx context.Context, idx, targets []int64) (float64, error) {
	if t.err != nil {
		return 0, t.err
	}
	T := t.cfg.SeqLen
	n := max(len(idx), len(targets))
	if n == 0 || n%T != 0 {
		return 0, t.fail(fmt.Errorf("layout: rank %d: Eval: %d token ids (targets %d) are not whole sequences of length %d", t.mesh.Rank(), len(idx), len(targets), T))
	}
	B := n / T
	restore := autograd.NoGrad(t.Parameters()...)
	defer restore()
	pp := t.mesh.Group("pp")
	P := t.cfg.PP
	me := t.mesh.Coord("pp")
	last := P*t.cfg.Virtual - 1
	var sends []distributed.Work
	var carry *tensor.Tensor // output of the previous stage when it ran here
	loss := []float64{0}
	for c, st := range t.stages {
		s := c*P + me
		if err := st.SetBatch(ctx, idx, targets, B, T, 1); err != nil {
			return 0, t.fail(fmt.Errorf("layout: rank %d: Eval: %w", t.mesh.Rank(), err))
		}
		var in *autograd.Var
		if s > 0 {
			if from := (s - 1) % P; from == me {
				in = autograd.NewVar(carry, false)
			} else {
				buf := tensor.New(B, T, t.model.D)
				if err := wait(ctx, pp.Recv(ctx, distributed.FromTensor(buf), from, s)); err != nil {
					return 0, t.fail(fmt.Errorf("layout: rank %d: Eval: receiving stage %d's input from pipeline rank %d: %w", t.mesh.Rank(), s, from, err))
				}
				in = autograd.NewVar(buf, false)
			}
		}
		out, err := st.Forward(0, in)
		if err != nil {
			return 0, t.fail(fmt.Errorf("layout: rank %d: Eval: stage %d: %w", t.mesh.Rank(), s, err))
		}
		if s == last {
			loss[0] = float64(out.Value.Item())
			continue
		}
		carry = out.Value.Contiguous()
		if to := (s + 1) % P; to != me {
			sends = append(sends, pp.Send(ctx, distributed.FromTensor(carry), to, s+1))
		}
	}
	for _, w := range sends {
		if err := wait(ctx, w); err != nil {
			return 0, t.fail(fmt.Errorf("layout: rank %d: Eval: sending an activation: %w", t.mesh.Rank(), err))
		}
	}
	if P > 1 {
		if err := wait(ctx, pp.Broadcast(ctx, distributed.F64(loss), last%P)); err != nil {
			return 0, t.fail(fmt.Errorf("layout: rank %d: Eval: loss broadcast: %w", t.mesh.Rank(), err))
		}
	}
	if t.cfg.DP > 1 {
		if err := wait(ctx, t.mesh.Group("dp").AllReduce(ctx, distributed.F64(loss), distributed.Avg)); err != nil {
			return 0, t.fail(fmt.Errorf("layout: rank %d: Eval: data-parallel loss all-reduce: %w", t.mesh.Rank(), err))
		}
	}
	return loss[0], nil
}
