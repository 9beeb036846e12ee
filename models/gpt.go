package models

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"

	"github.com/cohortml/cohort/autograd"
	"github.com/cohortml/cohort/nn"
	"github.com/cohortml/cohort/tensor"
)

// GPTConfig sizes a GPT.
type GPTConfig struct {
	Vocab  int // token ids are in [0, Vocab)
	Ctx    int // longest sequence
	NLayer int
	D      int // model width; NHead must divide it
	NHead  int
}

// GPTMini is the anchor workload: a byte-level model with vocab 256,
// context 64, 4 layers, width 128 and 4 heads.
func GPTMini() GPTConfig { return GPTConfig{Vocab: 256, Ctx: 64, NLayer: 4, D: 128, NHead: 4} }

// GPT2 is OpenAI's GPT-2 "small" (124M) as llm.c and Hugging Face's
// GPT2LMHeadModel build it: the GPT-2 BPE vocabulary of 50,257 tokens,
// context 1024, 12 layers, width 768, 12 heads; 124,439,808 parameters
// with the head tied to wte. checkpoint.LoadGPT2 reads its weights from a
// transformers safetensors file.
func GPT2() GPTConfig { return GPTConfig{Vocab: 50257, Ctx: 1024, NLayer: 12, D: 768, NHead: 12} }

// NumParams is the number of parameters of a GPT of this configuration
// (the head shares wte and adds none): the embeddings, per block two
// LayerNorms, the qkv, output and two MLP projections with their biases,
// and the final LayerNorm.
func (c GPTConfig) NumParams() int {
	d := c.D
	block := 2*2*d + (3*d*d + 3*d) + (d*d + d) + (4*d*d + 4*d) + (4*d*d + d)
	return c.Vocab*d + c.Ctx*d + c.NLayer*block + 2*d
}

func (c GPTConfig) validate() error {
	if c.Vocab <= 0 || c.Ctx <= 0 || c.NLayer < 0 || c.D <= 0 || c.NHead <= 0 {
		return fmt.Errorf("models: GPT config %+v: sizes must be positive", c)
	}
	if c.D%c.NHead != 0 {
		return fmt.Errorf("models: GPT config %+v: %d heads do not divide width %d", c, c.NHead, c.D)
	}
	return nil
}

// GPT is a GPT-2 style language model:
//
//	h = wte[idx] + wpe[0:T]
//	h = Block_i(h) for each layer (pre-LayerNorm, causal attention, 4·D GELU-tanh MLP)
//	logits = LN_f(h) @ wteᵀ  (the head shares wte; no bias)
//
// This is GPT-2's architecture exactly, as Hugging Face's GPT2LMHeadModel
// computes it in evaluation mode: learned position embeddings, LayerNorm
// eps 1e-5 before each sublayer and after the last block, biases on every
// projection, scores scaled by 1/√(D/NHead) under a causal mask, the tanh
// approximation of GELU ("gelu_new"), and the head tied to wte. Only the
// storage differs: GPT-2 keeps its projections in Conv1D layout [in, out]
// where GPT has PyTorch's Linear layout [out, in] (checkpoint.SaveGPT2 and
// LoadGPT2 convert).
//
// Parameters in order: "wte" [Vocab, D], "wpe" [Ctx, D], "h.{i}.…" per
// block (see nn.Block), "ln_f.weight", "ln_f.bias".
type GPT struct {
	Config GPTConfig
	Wte    *autograd.Var
	Wpe    *autograd.Var
	Blocks []*nn.Block
	LNF    *nn.LayerNorm
}

// NewGPT builds a GPT initialised as nanoGPT (and the anchor gpt_mini.py):
// every Linear weight and both embeddings N(0, 0.02), the two residual
// projections (attn.proj, mlp.proj) N(0, 0.02/√(2·NLayer)), biases 0,
// LayerNorm weights 1, drawn from rng in parameter order.
func NewGPT(rng *rand.Rand, c GPTConfig) (*GPT, error) {
	if err := c.validate(); err != nil {
		return nil, err
	}
	g := &GPT{
		Config: c,
		Wte:    autograd.NewVar(tensor.New(c.Vocab, c.D), true),
		Wpe:    autograd.NewVar(tensor.New(c.Ctx, c.D), true),
		LNF:    nn.NewLayerNorm(c.D),
	}
	for i := 0; i < c.NLayer; i++ {
		g.Blocks = append(g.Blocks, nn.NewBlock(rng, c.D, c.NHead))
	}
	std := float32(0.02)
	stdProj := float32(0.02 / math.Sqrt(2*float64(max(c.NLayer, 1))))
	for _, p := range g.NamedParameters() {
		v := p.Param.Value
		switch {
		case strings.HasSuffix(p.Name, "ln1.weight"), strings.HasSuffix(p.Name, "ln2.weight"), p.Name == "ln_f.weight":
			v.Fill(1)
		case strings.HasSuffix(p.Name, ".bias"):
			v.Fill(0)
		case strings.HasSuffix(p.Name, "attn.proj.weight"), strings.HasSuffix(p.Name, "mlp.proj.weight"):
			v.FillNormal(rng, 0, stdProj)
		default:
			v.FillNormal(rng, 0, std)
		}
	}
	return g, nil
}

// Forward returns the logits [B, T, Vocab] for token ids idx (B·T of them,
// row-major [B, T]). It panics when T exceeds the context, len(idx) is not
// B·T, or an id is out of range.
func (g *GPT) Forward(idx []int64, B, T int) *autograd.Var {
	if T <= 0 || T > g.Config.Ctx || B <= 0 || len(idx) != B*T {
		panic(fmt.Sprintf("models: GPT.Forward: %d ids for batch %d × length %d (context %d)", len(idx), B, T, g.Config.Ctx))
	}
	h := g.Embed(idx, B, T)
	autograd.Transient(h) // read only by the first block
	h = g.ForwardBlocks(h, 0, len(g.Blocks))
	autograd.Transient(h) // read only by the head
	return g.Head(h)
}

// Loss returns the mean cross-entropy of logits [B, T, Vocab] against the
// next-token targets (B·T ids, row-major).
func (g *GPT) Loss(logits *autograd.Var, targets []int64) *autograd.Var {
	V := logits.Value.Dim(-1)
	return autograd.CrossEntropy(autograd.Reshape(logits, -1, V), targets, autograd.CrossEntropyOptions{})
}

func (g *GPT) NamedParameters() []nn.NamedParameter {
	ps := []nn.NamedParameter{{Name: "wte", Param: g.Wte}, {Name: "wpe", Param: g.Wpe}}
	for i, b := range g.Blocks {
		ps = append(ps, nn.ChildParameters(nn.Child{Name: "h." + strconv.Itoa(i), Module: b})...)
	}
	return append(ps, nn.ChildParameters(nn.Child{Name: "ln_f", Module: g.LNF})...)
}

func (g *GPT) NamedBuffers() []nn.NamedBuffer { return nil }
func (g *GPT) SetTraining(on bool) {
	for _, b := range g.Blocks {
		b.SetTraining(on)
	}
}

var _ nn.Module = (*GPT)(nil)
