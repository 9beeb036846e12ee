package tp

import (
	"context"
	"fmt"

	"github.com/cohortml/cohort/autograd"
	"github.com/cohortml/cohort/nn"
	"github.com/cohortml/cohort/tensor"
)

// Every layer here is built by sharding a full nn layer, so that a
// tensor-parallel model starts from exactly the weights of the unsharded
// one; the constructors return an error naming the sizes when they do not
// split across the group.

// ColumnParallelLinear is y = x·Wᵀ + b with the output features split
// across the ranks: Weight holds rows [r·out/n, (r+1)·out/n) of the full
// [out, in] weight, Bias the same entries of the full bias. The input is
// replicated and passes through Copy (f). The output is this rank's chunk
// of the features, or, with GatherOutput, all of them (Gather).
// Parameters: "weight" and "bias", sharded on dimension 0.
type ColumnParallelLinear struct {
	Weight, Bias *autograd.Var
	GatherOutput bool
	comm         *Comm
	blocks       int
}

// NewColumnParallelLinear shards full across c's ranks.
func NewColumnParallelLinear(c *Comm, full *nn.Linear, gatherOutput bool) (*ColumnParallelLinear, error) {
	return newColumn(c, full, gatherOutput, 1)
}

// newColumn shards full's output features in blocks blocks (3 for a fused
// q|k|v projection: each block is split across the ranks).
func newColumn(c *Comm, full *nn.Linear, gatherOutput bool, blocks int) (*ColumnParallelLinear, error) {
	p := ShardedOn(0, blocks)
	if err := p.check(full.Weight.Value.Shape(), c.Size()); err != nil {
		return nil, fmt.Errorf("tp: column-parallel linear %v: %d output features do not split into %d block(s) across %d ranks",
			full.Weight.Value.Shape(), full.Weight.Value.Dim(0), max(blocks, 1), c.Size())
	}
	l := &ColumnParallelLinear{GatherOutput: gatherOutput, comm: c, blocks: blocks}
	l.Weight = autograd.NewVar(p.Shard(full.Weight.Value, c.Rank(), c.Size()), true)
	if full.Bias != nil {
		l.Bias = autograd.NewVar(p.Shard(full.Bias.Value, c.Rank(), c.Size()), true)
	}
	return l, nil
}

// Forward applies the layer to the replicated x [..., in].
func (l *ColumnParallelLinear) Forward(ctx context.Context, x *autograd.Var) *autograd.Var {
	y := autograd.Linear(Copy(ctx, l.comm, x), l.Weight, l.Bias)
	if l.GatherOutput && l.comm.Size() > 1 {
		autograd.Transient(y) // read only by the gather
		y = Gather(ctx, l.comm, y)
	}
	return y
}

func (l *ColumnParallelLinear) Shards() []Shard {
	p := ShardedOn(0, l.blocks)
	s := []Shard{{"weight", l.Weight, p}}
	if l.Bias != nil {
		s = append(s, Shard{"bias", l.Bias, p})
	}
	return s
}
func (l *ColumnParallelLinear) NamedParameters() []nn.NamedParameter {
	return namedParameters(l.Shards())
}
func (l *ColumnParallelLinear) NamedBuffers() []nn.NamedBuffer { return nil }
func (l *ColumnParallelLinear) SetTraining(bool)               {}

// RowParallelLinear is y = x·Wᵀ + b with the input features split across
// the ranks: Weight holds columns [r·in/n, (r+1)·in/n) of the full
// [out, in] weight; Bias is replicated and added once, after the partial
// products are summed with Reduce (g). The input is this rank's chunk of
// the features (a column-parallel layer's output), or, unless
// InputIsParallel, the replicated full input, which Split cuts first.
// Parameters: "weight" (sharded on dimension 1), "bias" (replicated).
type RowParallelLinear struct {
	Weight, Bias    *autograd.Var
	InputIsParallel bool
	comm            *Comm
}

// NewRowParallelLinear shards full across c's ranks.
func NewRowParallelLinear(c *Comm, full *nn.Linear, inputIsParallel bool) (*RowParallelLinear, error) {
	p := ShardedOn(1, 1)
	if err := p.check(full.Weight.Value.Shape(), c.Size()); err != nil {
		return nil, fmt.Errorf("tp: row-parallel linear %v: %d input features do not split across %d ranks",
			full.Weight.Value.Shape(), full.Weight.Value.Dim(1), c.Size())
	}
	l := &RowParallelLinear{InputIsParallel: inputIsParallel, comm: c}
	l.Weight = autograd.NewVar(p.Shard(full.Weight.Value, c.Rank(), c.Size()), true)
	if full.Bias != nil {
		l.Bias = autograd.NewVar(full.Bias.Value.Clone(), true)
	}
	return l, nil
}

// Forward applies the layer to x: [..., in/n] when InputIsParallel, else
// the replicated [..., in]. The output [..., out] is replicated.
func (l *RowParallelLinear) Forward(ctx context.Context, x *autograd.Var) *autograd.Var {
	if !l.InputIsParallel && l.comm.Size() > 1 {
		x = Split(ctx, l.comm, x)
		autograd.Transient(x) // read only by the product
	}
	return l.forwardAdd(ctx, x, nil)
}

// forwardAdd is Forward on this rank's x [..., in/n] plus r (replicated,
// [..., out]; nil for none): the partial product is all-reduced in place
// and the bias and r are added into it, (Reduce(x·Wᵀ) + b) + r.
func (l *RowParallelLinear) forwardAdd(ctx context.Context, x, r *autograd.Var) *autograd.Var {
	// The partial product is read by nothing but the all-reduce.
	y := reduceOwned(ctx, l.comm, autograd.Linear(x, l.Weight, nil))
	var terms []*autograd.Var
	if l.Bias != nil {
		terms = append(terms, l.Bias)
	}
	if r != nil {
		terms = append(terms, r)
	}
	if len(terms) == 0 {
		return y
	}
	return sumInto("tp.RowParallelAdd", y, terms...)
}

func (l *RowParallelLinear) Shards() []Shard {
	s := []Shard{{"weight", l.Weight, ShardedOn(1, 1)}}
	if l.Bias != nil {
		s = append(s, Shard{"bias", l.Bias, Replicated})
	}
	return s
}
func (l *RowParallelLinear) NamedParameters() []nn.NamedParameter {
	return namedParameters(l.Shards())
}
func (l *RowParallelLinear) NamedBuffers() []nn.NamedBuffer { return nil }
func (l *RowParallelLinear) SetTraining(bool)               {}

// Attention is nn.CausalSelfAttention with its heads split across the
// ranks: rank r computes heads [r·H/n, (r+1)·H/n). The fused projection
// QKV is column-parallel with q, k and v sharded separately (each rank
// holds whole heads of all three: its local [3·d/n, d] weight is
// q_r | k_r | v_r), and Proj is row-parallel over the concatenated heads.
// One Copy before QKV and one Reduce after Proj are its only collectives.
// Parameters as nn.CausalSelfAttention: "qkv.weight", "qkv.bias",
// "proj.weight", "proj.bias".
type Attention struct {
	QKV   *ColumnParallelLinear
	Proj  *RowParallelLinear
	NHead int // heads on this rank
	comm  *Comm
}

// NewAttention shards full across c's ranks; the number of heads must
// split evenly.
func NewAttention(c *Comm, full *nn.CausalSelfAttention) (*Attention, error) {
	n := c.Size()
	if full.NHead%n != 0 {
		return nil, fmt.Errorf("tp: attention: %d heads do not split across %d tensor-parallel ranks", full.NHead, n)
	}
	qkv, err := newColumn(c, full.QKV, false, 3)
	if err != nil {
		return nil, err
	}
	proj, err := NewRowParallelLinear(c, full.Proj, true)
	if err != nil {
		return nil, err
	}
	return &Attention{QKV: qkv, Proj: proj, NHead: full.NHead / n, comm: c}, nil
}

// Forward applies attention to the replicated x [B, T, d]; the output
// [B, T, d] is replicated.
func (a *Attention) Forward(ctx context.Context, x *autograd.Var) *autograd.Var {
	return a.Proj.Forward(ctx, a.heads(ctx, x))
}

// heads returns this rank's heads' outputs [B, T, NHead·hd]: attention
// before the output projection, marked Transient (read only by the
// projection).
func (a *Attention) heads(ctx context.Context, x *autograd.Var) *autograd.Var {
	s := x.Value.Shape()
	if len(s) != 3 {
		panic(fmt.Sprintf("tp: Attention: input shape %v, want [B, T, d]", s))
	}
	dl := a.QKV.Weight.Value.Dim(0) / 3                             // local width: NHead·hd
	qkv := autograd.Linear(Copy(ctx, a.comm, x), a.QKV.Weight, nil) // [B, T, 3·dl]
	if a.QKV.Bias != nil {
		qkv = sumInto("tp.AddBias", qkv, keyBiasZeroGrad(a.QKV.Bias, dl))
	}
	autograd.Transient(qkv) // read only by the attention
	// the fused kernel the unsharded layer runs (nn.CausalSelfAttention):
	// this rank's heads straight from its slice of the projection
	h := autograd.AttentionQKV(qkv, a.NHead, true)
	autograd.Transient(h)
	return h
}

// keyBiasZeroGrad passes the local qkv bias through and zeroes the key
// entries [dl, 2dl) of its gradient, whose exact value is 0 (see
// nn.CausalSelfAttention: float32 round-off there would be blown up by
// Adam, and the unsharded layer reports exactly 0).
func keyBiasZeroGrad(b *autograd.Var, dl int) *autograd.Var {
	return autograd.Record("tp.KeyBiasZeroGrad", b.Value, []*autograd.Var{b}, func(g *tensor.Tensor) []*tensor.Tensor {
		g = g.Clone()
		g.Narrow(0, dl, dl).Zero()
		return []*tensor.Tensor{g}
	})
}

func (a *Attention) Shards() []Shard {
	return childShards(child{"qkv", a.QKV}, child{"proj", a.Proj})
}
func (a *Attention) NamedParameters() []nn.NamedParameter { return namedParameters(a.Shards()) }
func (a *Attention) NamedBuffers() []nn.NamedBuffer       { return nil }
func (a *Attention) SetTraining(bool)                     {}

// MLP is nn.MLP with its hidden features split: FC column-parallel, the
// GELU local, Proj row-parallel. Parameters as nn.MLP.
type MLP struct {
	FC   *ColumnParallelLinear
	Proj *RowParallelLinear
}

// NewMLP shards full across c's ranks; the hidden width must split evenly.
func NewMLP(c *Comm, full *nn.MLP) (*MLP, error) {
	if h := full.FC.Weight.Value.Dim(0); h%c.Size() != 0 {
		return nil, fmt.Errorf("tp: MLP: hidden width %d does not split across %d tensor-parallel ranks", h, c.Size())
	}
	fc, err := NewColumnParallelLinear(c, full.FC, false)
	if err != nil {
		return nil, err
	}
	proj, err := NewRowParallelLinear(c, full.Proj, true)
	if err != nil {
		return nil, err
	}
	return &MLP{FC: fc, Proj: proj}, nil
}

// Forward applies the MLP to the replicated x; the output is replicated.
func (m *MLP) Forward(ctx context.Context, x *autograd.Var) *autograd.Var {
	return m.Proj.Forward(ctx, m.hidden(ctx, x))
}

// hidden returns this rank's hidden features GELU(FC(x)), marked
// Transient (read only by the projection).
func (m *MLP) hidden(ctx context.Context, x *autograd.Var) *autograd.Var {
	h := m.FC.Forward(ctx, x)
	autograd.Transient(h) // read only by the activation
	h = autograd.GELUTanh(h)
	autograd.Transient(h)
	return h
}

func (m *MLP) Shards() []Shard                      { return childShards(child{"fc", m.FC}, child{"proj", m.Proj}) }
func (m *MLP) NamedParameters() []nn.NamedParameter { return namedParameters(m.Shards()) }
func (m *MLP) NamedBuffers() []nn.NamedBuffer       { return nil }
func (m *MLP) SetTraining(bool)                     {}

// Block is nn.Block with parallel attention and MLP; the LayerNorms are
// replicated. Parameters as nn.Block: "ln1.*", "attn.qkv.*",
// "attn.proj.*", "ln2.*", "mlp.fc.*", "mlp.proj.*".
type Block struct {
	LN1  *nn.LayerNorm
	Attn *Attention
	LN2  *nn.LayerNorm
	MLP  *MLP
}

// NewBlock shards full across c's ranks.
func NewBlock(c *Comm, full *nn.Block) (*Block, error) {
	attn, err := NewAttention(c, full.Attn)
	if err != nil {
		return nil, err
	}
	mlp, err := NewMLP(c, full.MLP)
	if err != nil {
		return nil, err
	}
	return &Block{LN1: cloneLayerNorm(full.LN1), Attn: attn, LN2: cloneLayerNorm(full.LN2), MLP: mlp}, nil
}

func cloneLayerNorm(l *nn.LayerNorm) *nn.LayerNorm {
	return &nn.LayerNorm{
		Weight: autograd.NewVar(l.Weight.Value.Clone(), true),
		Bias:   autograd.NewVar(l.Bias.Value.Clone(), true),
		Eps:    l.Eps,
	}
}

// Forward applies the block to the replicated x [B, T, d].
// Each residual add goes into the all-reduced output of the projection
// before it (with the bias: (Reduce(h·Wᵀ) + b) + x, the sums of
// Attention.Forward and MLP.Forward followed by an add). Every
// intermediate is Transient, as in nn.Block: read only by the next ops
// here, so Backward hands its storage on to the next step.
func (b *Block) Forward(ctx context.Context, x *autograd.Var) *autograd.Var {
	h := b.LN1.Forward(x)
	autograd.Transient(h)
	x = b.Attn.Proj.forwardAdd(ctx, b.Attn.heads(ctx, h), x)
	autograd.Transient(x) // read only by LN2 and the residual add below
	h = b.LN2.Forward(x)
	autograd.Transient(h)
	return b.MLP.Proj.forwardAdd(ctx, b.MLP.hidden(ctx, h), x)
}

func (b *Block) Shards() []Shard {
	return childShards(child{"ln1", replicated{b.LN1}}, child{"attn", b.Attn}, child{"ln2", replicated{b.LN2}}, child{"mlp", b.MLP})
}
func (b *Block) NamedParameters() []nn.NamedParameter { return namedParameters(b.Shards()) }
func (b *Block) NamedBuffers() []nn.NamedBuffer       { return nil }
func (b *Block) SetTraining(bool)                     {}

// replicated adapts a plain nn.Module whose parameters every rank holds
// whole.
type replicated struct{ nn.Module }

func (r replicated) Shards() []Shard {
	var s []Shard
	for _, p := range r.NamedParameters() {
		s = append(s, Shard{p.Name, p.Param, Replicated})
	}
	return s
}

var (
	_ Module = (*ColumnParallelLinear)(nil)
	_ Module = (*RowParallelLinear)(nil)
	_ Module = (*Attention)(nil)
	_ Module = (*MLP)(nil)
	_ Module = (*Block)(nil)
)
