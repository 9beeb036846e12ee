package nn

import (
	"fmt"
	"math/rand/v2"

	"github.com/cohortml/cohort/autograd"
	"github.com/cohortml/cohort/tensor"
)

// CausalSelfAttention is multi-head causal self-attention with one fused
// input projection: qkv = x·QKVᵀ + b splits into q | k | v along the
// features, head h uses features h·hd:(h+1)·hd of each, scores are scaled
// by 1/√hd and masked so position i sees positions j ≤ i, and the heads'
// outputs are concatenated in order before Proj. Parameters:
// "qkv.weight" [3d, d], "qkv.bias", "proj.weight" [d, d], "proj.bias".
//
// The key part of the qkv bias (entries d..2d) shifts every score of a
// query row by the same amount, which softmax ignores: its exact gradient
// is zero. Backward reports exactly zero for it rather than float32
// round-off (about 1e-9), which Adam's normalisation would otherwise blow
// up into steps of the order of the learning rate.
type CausalSelfAttention struct {
	QKV, Proj *Linear
	NHead     int
}

// NewCausalSelfAttention returns attention over d features in nHead heads
// (nHead must divide d), with PyTorch's default Linear initialisation.
func NewCausalSelfAttention(rng *rand.Rand, d, nHead int) *CausalSelfAttention {
	checkPositive("NewCausalSelfAttention", d, nHead)
	if d%nHead != 0 {
		panic(fmt.Sprintf("nn: NewCausalSelfAttention: %d heads do not divide %d features", nHead, d))
	}
	return &CausalSelfAttention{QKV: NewLinear(rng, d, 3*d, true), Proj: NewLinear(rng, d, d, true), NHead: nHead}
}

// Forward applies attention to x [B, T, d].
func (a *CausalSelfAttention) Forward(x *autograd.Var) *autograd.Var {
	return a.Proj.Forward(a.heads(x))
}

// heads returns the heads' outputs concatenated, [B, T, d]: attention
// before the output projection. The qkv bias is folded into the
// projection's GEMM and the heads are read out of qkv in place
// (autograd.AttentionQKV).
func (a *CausalSelfAttention) heads(x *autograd.Var) *autograd.Var {
	s := x.Value.Shape()
	if len(s) != 3 {
		panic(fmt.Sprintf("nn: CausalSelfAttention: input shape %v, want [B, T, d]", s))
	}
	d := s[2]
	bias := a.QKV.Bias
	if bias != nil {
		bias = keyBiasZeroGrad(bias, d)
	}
	qkv := autograd.Linear(x, a.QKV.Weight, bias) // [B, T, 3d]
	autograd.Transient(qkv)                       // read only by the attention
	return autograd.AttentionQKV(qkv, a.NHead, true)
}

// keyBiasZeroGrad passes the qkv bias through unchanged and zeroes the
// key entries [d, 2d) of its gradient, whose exact value is 0.
func keyBiasZeroGrad(b *autograd.Var, d int) *autograd.Var {
	return autograd.Record("KeyBiasZeroGrad", b.Value, []*autograd.Var{b}, func(g *tensor.Tensor) []*tensor.Tensor {
		g = g.Clone()
		g.Narrow(0, d, d).Zero()
		return []*tensor.Tensor{g}
	})
}

func (a *CausalSelfAttention) children() []Child {
	return []Child{{"qkv", a.QKV}, {"proj", a.Proj}}
}
func (a *CausalSelfAttention) NamedParameters() []NamedParameter {
	return ChildParameters(a.children()...)
}
func (a *CausalSelfAttention) NamedBuffers() []NamedBuffer { return nil }
func (a *CausalSelfAttention) SetTraining(bool)            {}

// MLP is the transformer feed-forward block: Proj(GELU_tanh(FC(x))) with
// FC d→hidden and Proj hidden→d. Parameters: "fc.*", "proj.*".
type MLP struct {
	FC, Proj *Linear
}

// NewMLP returns a feed-forward block d→hidden→d.
func NewMLP(rng *rand.Rand, d, hidden int) *MLP {
	return &MLP{FC: NewLinear(rng, d, hidden, true), Proj: NewLinear(rng, hidden, d, true)}
}

// Forward applies the MLP to x [..., d]; FC and GELU run as one op
// (autograd.LinearGELUTanh).
func (m *MLP) Forward(x *autograd.Var) *autograd.Var {
	return m.Proj.Forward(autograd.LinearGELUTanh(x, m.FC.Weight, m.FC.Bias))
}
func (m *MLP) NamedParameters() []NamedParameter {
	return ChildParameters(Child{"fc", m.FC}, Child{"proj", m.Proj})
}
func (m *MLP) NamedBuffers() []NamedBuffer { return nil }
func (m *MLP) SetTraining(bool)            {}

// Block is a pre-LayerNorm transformer block:
//
//	x = x + Attn(LN1(x))
//	x = x + MLP(LN2(x))
//
// Parameters, in order: "ln1.*", "attn.qkv.*", "attn.proj.*", "ln2.*",
// "mlp.fc.*", "mlp.proj.*" (the GPT-2 layout).
type Block struct {
	LN1  *LayerNorm
	Attn *CausalSelfAttention
	LN2  *LayerNorm
	MLP  *MLP
}

// NewBlock returns a block over d features with nHead heads and a 4·d MLP.
func NewBlock(rng *rand.Rand, d, nHead int) *Block {
	return &Block{
		LN1: NewLayerNorm(d), Attn: NewCausalSelfAttention(rng, d, nHead),
		LN2: NewLayerNorm(d), MLP: NewMLP(rng, d, 4*d),
	}
}

// Forward applies the block to x [B, T, d]. Each residual add is fused
// with the projection before it (autograd.AddLinear), and the MLP's
// first layer with its GELU (autograd.LinearGELUTanh).
func (b *Block) Forward(x *autograd.Var) *autograd.Var {
	p := b.Attn.Proj
	// Every intermediate is Transient: read only by the next ops here.
	h := b.LN1.Forward(x)
	autograd.Transient(h)
	h = b.Attn.heads(h)
	autograd.Transient(h)
	x = autograd.AddLinear(x, h, p.Weight, p.Bias)
	autograd.Transient(x) // read only by LN2 and the residual add below
	h = b.LN2.Forward(x)
	autograd.Transient(h)
	h = autograd.LinearGELUTanh(h, b.MLP.FC.Weight, b.MLP.FC.Bias)
	autograd.Transient(h) // read only by the projection
	p = b.MLP.Proj
	return autograd.AddLinear(x, h, p.Weight, p.Bias)
}

func (b *Block) children() []Child {
	return []Child{{"ln1", b.LN1}, {"attn", b.Attn}, {"ln2", b.LN2}, {"mlp", b.MLP}}
}
func (b *Block) NamedParameters() []NamedParameter { return ChildParameters(b.children()...) }
func (b *Block) NamedBuffers() []NamedBuffer       { return nil }
func (b *Block) SetTraining(bool)                  {}
