package plan

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
)

// Model describes what is trained: a GPT-style decoder (Kind "gpt") or a
// multilayer perceptron (Kind "mlp"), the batch of a step and the
// precision. It is read from JSON (--model-config) or named (NamedModel).
type Model struct {
	Name string `json:"name"`
	// Kind is "gpt" (the default) or "mlp".
	Kind string `json:"kind,omitempty"`

	// GPT: Layers transformer blocks of width DModel with Heads heads, an
	// MLP of width FFN (0: 4·DModel), Seq tokens per sequence and Vocab
	// token ids. TiedEmbeddings (nil: true) reuses the token embedding as
	// the output projection, as GPT-2 and cohort's GPT do.
	Layers         int   `json:"layers,omitempty"`
	DModel         int   `json:"d_model,omitempty"`
	Heads          int   `json:"heads,omitempty"`
	FFN            int   `json:"ffn,omitempty"`
	Seq            int   `json:"seq,omitempty"`
	Vocab          int   `json:"vocab,omitempty"`
	TiedEmbeddings *bool `json:"tied_embeddings,omitempty"`

	// MLP: the widths of its layers, input first (784, 1024, 1024, 10).
	Widths []int `json:"widths,omitempty"`

	// GlobalBatch is the sequences (samples, for an MLP) of one step over
	// all replicas; MicroBatch the sequences of one microbatch (0: every
	// size that divides the batch is tried).
	GlobalBatch int `json:"global_batch"`
	MicroBatch  int `json:"micro_batch,omitempty"`

	// Precision is "fp32" (cohort's CPU training: 4-byte parameters,
	// gradients and activations, Adam's two moments) or "mixed" (2-byte
	// parameters, gradients and activations; Adam keeps an fp32 master
	// copy and two fp32 moments: 12 bytes per parameter).
	Precision string `json:"precision,omitempty"`
	// Recompute keeps only each block's input during the forward pass and
	// recomputes the rest in backward (full activation recomputation).
	Recompute bool `json:"recompute,omitempty"`
}

// Precision figures, bytes per element.
type precision struct {
	param, grad, act int64 // parameter, gradient (as reduced) and activation element
	opt              int64 // optimizer state per parameter (Adam)
	dtype            string
}

func (m *Model) precision() precision {
	if m.Precision == "mixed" {
		return precision{param: 2, grad: 2, act: 2, opt: 12, dtype: "bf16"}
	}
	return precision{param: 4, grad: 4, act: 4, opt: 8, dtype: "fp32"}
}

func (m *Model) tied() bool { return m.TiedEmbeddings == nil || *m.TiedEmbeddings }

func (m *Model) ffn() int {
	if m.FFN > 0 {
		return m.FFN
	}
	return 4 * m.DModel
}

// Validate reports the first field that makes m unusable.
func (m *Model) Validate() error {
	bad := func(field string, v any, want string) error {
		return fmt.Errorf("plan: model %s: %s is %v: want %s", m.Name, field, v, want)
	}
	switch m.Kind {
	case "", "gpt":
		for _, f := range []struct {
			name string
			v    int
		}{{"layers", m.Layers}, {"d_model", m.DModel}, {"heads", m.Heads}, {"seq", m.Seq}, {"vocab", m.Vocab}} {
			if f.v <= 0 {
				return bad(f.name, f.v, "a positive integer")
			}
		}
		if m.DModel%m.Heads != 0 {
			return bad("d_model", m.DModel, fmt.Sprintf("a multiple of heads (%d)", m.Heads))
		}
		if m.FFN < 0 {
			return bad("ffn", m.FFN, "0 (4·d_model) or positive")
		}
	case "mlp":
		if len(m.Widths) < 2 {
			return bad("widths", m.Widths, "at least an input and an output width")
		}
		for _, w := range m.Widths {
			if w <= 0 {
				return bad("widths", m.Widths, "positive widths")
			}
		}
	default:
		return bad("kind", fmt.Sprintf("%q", m.Kind), `"gpt" or "mlp"`)
	}
	if m.GlobalBatch <= 0 {
		return bad("global_batch", m.GlobalBatch, "a positive integer")
	}
	if m.MicroBatch < 0 || (m.MicroBatch > 0 && m.GlobalBatch%m.MicroBatch != 0) {
		return bad("micro_batch", m.MicroBatch, fmt.Sprintf("0 or a divisor of global_batch (%d)", m.GlobalBatch))
	}
	if m.Precision != "" && m.Precision != "fp32" && m.Precision != "mixed" {
		return bad("precision", fmt.Sprintf("%q", m.Precision), `"fp32" or "mixed"`)
	}
	return nil
}

// ParseModel reads a model description from JSON and validates it.
// Unknown fields are an error, so that a misspelt one is not ignored.
func ParseModel(data []byte) (*Model, error) {
	var m Model
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("plan: model: %w", err)
	}
	if err := m.Validate(); err != nil {
		return nil, err
	}
	return &m, nil
}

// namedModels are the repository's own models.
var namedModels = map[string]Model{
	// GPT-mini (models.GPTMini, examples/gpt): 4 blocks of width 128,
	// 4 heads, 64-byte windows, a 256-symbol vocabulary, tied embeddings;
	// batches of 32 windows, trained in float32.
	"gpt": {Name: "gpt", Kind: "gpt", Layers: 4, DModel: 128, Heads: 4, Seq: 64, Vocab: 256, GlobalBatch: 32, Precision: "fp32"},
	// GPT-2 small (124M): 12 blocks of width 768, 12 heads, 1024 tokens,
	// 50,257 token ids, tied embeddings; batches of 512 sequences.
	"gpt2": {Name: "gpt2", Kind: "gpt", Layers: 12, DModel: 768, Heads: 12, Seq: 1024, Vocab: 50257, GlobalBatch: 512, Precision: "fp32"},
	// The MNIST MLP (models.MLP): 784-1024-1024-10, batches of 64.
	"mlp": {Name: "mlp", Kind: "mlp", Widths: []int{784, 1024, 1024, 10}, GlobalBatch: 64, Precision: "fp32"},
}

// NamedModel returns one of the repository's models: "gpt" (GPT-mini),
// "gpt2" (GPT-2 small) or "mlp" (the MNIST MLP).
func NamedModel(name string) (*Model, error) {
	m, ok := namedModels[name]
	if !ok {
		names := make([]string, 0, len(namedModels))
		for n := range namedModels {
			names = append(names, n)
		}
		sort.Strings(names)
		return nil, fmt.Errorf("plan: unknown model %q (have %s, or a --model-config file)", name, strings.Join(names, ", "))
	}
	m.Widths = append([]int(nil), m.Widths...)
	return &m, nil
}

// Cost is the accounting of one layer (or one end piece: embedding, head)
// for one microbatch of b sequences on one rank of a tensor-parallel group
// of size t.
//
// FLOPs follow Narayanan et al. 2021 (§5.1, eq. 2–3): a transformer block
// of width h on s tokens with an MLP of width f does, per sequence,
//
//	forward          2·s·(4h² + 2hf)  + 4·s²·h   (the GEMMs; QKᵀ and attention·V)
//	backward-input   2·s·(4h² + 2hf)  + 8·s²·h   (both attention products are input gradients)
//	backward-weight  2·s·(4h² + 2hf)
//
// (with f = 4h, 24sh² + 4s²h forward and three times that for a step;
// full recomputation adds one forward: 96sh²(1 + s/6h) for the block),
// the output projection 2·s·h·V forward and twice that backward, split
// evenly between input and weight gradients. Tensor parallelism divides
// every term by t (Megatron's column/row split of the GEMMs and heads).
//
// Activation bytes follow Korthikanti et al. 2022 (eq. 2 and §4.1): a
// block stores s·b·h·(34 + 5·a·s/h) bytes with 2-byte activations (10
// bytes per element of the block's width are replicated over tensor
// ranks, the rest divided: s·b·h·(10 + 24/t + 5·a·s/(h·t))); 4-byte
// activations double it. Full recomputation keeps only the block's input,
// 2·s·b·h bytes (4·s·b·h in fp32).
type Cost struct {
	Params  int64   // parameters held by this rank
	F, B, W float64 // FLOPs: forward, backward-input, backward-weight
	// GEMM is the size the efficiency curve is read at for the layer's
	// weight products: their forward FLOPs on this rank.
	GEMM float64
	// AttnF and AttnB are the parts of F and B spent in the attention
	// products (QKᵀ, attention·V), batched over heads; each head's product
	// is small (its inner dimension is the head width), so the curve is
	// read at one head's forward product, AttnGEMM = 2·s²·h/a.
	AttnF, AttnB, AttnGEMM float64
	ActBytes               int64 // activations kept for backward
	WorkBytes              int64 // memory-bound traffic of the elementwise work, forward (backward moves twice as much)
	// TPBytes is the size of each tensor-parallel all-reduce on the
	// layer's critical path; TPForward and TPBackward count them.
	TPBytes               int64
	TPForward, TPBackward int
	// TPSmallBytes are the sizes of the layer's small tensor-parallel
	// all-reduces on the critical path (the vocabulary-parallel loss's
	// row maxima and sums), once per microbatch.
	TPSmallBytes []int64
}

// costs returns the per-layer cost of m's repeated block (or the MLP's
// layers) and those of the first and last pipeline stage's extra pieces,
// for microbatches of b sequences under tensor parallelism t.
func (m *Model) blockCost(b, t int) Cost {
	p := m.precision()
	h, s, a, f := float64(m.DModel), float64(m.Seq), float64(m.Heads), float64(m.ffn())
	bs := float64(b) * s
	tt := float64(t)
	gemm := 2 * bs * (4*h*h + 2*h*f) / tt
	attn := 4 * float64(b) * s * s * h / tt
	act := s * float64(b) * h * (10 + 24/tt + 5*a*s/(h*tt)) * float64(p.act) / 2
	c := Cost{
		Params:     int64((4*h*h+2*h*f+3*h+f)/tt + 6*h), // weights and column-parallel biases split; row-parallel biases and LayerNorms replicated
		F:          gemm + attn,
		B:          gemm + 2*attn,
		W:          gemm,
		GEMM:       gemm,
		AttnF:      attn,
		AttnB:      2 * attn,
		AttnGEMM:   2 * s * s * h / a,
		ActBytes:   int64(act),
		WorkBytes:  int64(act),
		TPBytes:    int64(bs * h * float64(p.act)),
		TPForward:  2,
		TPBackward: 2,
	}
	if t == 1 {
		c.TPForward, c.TPBackward = 0, 0
	}
	if m.Recompute {
		c.ActBytes = int64(bs * h * float64(p.act))
	}
	return c
}

// headCost is the output projection and loss (last stage).
func (m *Model) headCost(b, t int) Cost {
	h, s, v := float64(m.DModel), float64(m.Seq), float64(m.Vocab)
	bs := float64(b) * s
	gemm := 2 * bs * h * v / float64(t)
	logits := int64(bs * v / float64(t) * 4) // logits and their softmax kept in fp32
	// The final LayerNorm and the output projection: its own weights, or,
	// tied, the last stage's copy of the token embedding (its gradient
	// summed with the first stage's).
	c := Cost{F: gemm, B: gemm, W: gemm, GEMM: gemm, ActBytes: logits, WorkBytes: logits,
		Params: int64(2*h + h*v/float64(t))}
	if t > 1 {
		// Megatron's f before the vocabulary-parallel projection: its
		// input's gradient all-reduced backward; the vocabulary-parallel
		// cross-entropy all-reduces the rows' maxima (4 bytes a token)
		// and their sums of exponentials with the target logits (16).
		c.TPBytes = int64(bs * h * float64(m.precision().act))
		c.TPBackward = 1
		c.TPSmallBytes = []int64{int64(bs * 4), int64(bs * 16)}
	}
	return c
}

// embedCost is the token and position embeddings (first stage); with
// tensor parallelism the vocabulary-parallel lookup ends in one
// all-reduce of the embedded microbatch.
func (m *Model) embedCost(b, t int) Cost {
	p := m.precision()
	h, s, v := float64(m.DModel), float64(m.Seq), float64(m.Vocab)
	bs := float64(b) * s
	c := Cost{Params: int64(h*v/float64(t) + s*h), WorkBytes: int64(bs * h * float64(p.act)),
		TPBytes: int64(bs * h * float64(p.act)), TPForward: 1}
	if t == 1 {
		c.TPForward = 0
	}
	return c
}

// mlpCosts returns the MLP's layers for microbatches of b samples.
func (m *Model) mlpCosts(b int) []Cost {
	p := m.precision()
	var out []Cost
	for i := 0; i+1 < len(m.Widths); i++ {
		in, o := float64(m.Widths[i]), float64(m.Widths[i+1])
		g := 2 * float64(b) * in * o
		bi := g
		if i == 0 {
			bi = 0 // nothing needs the input's gradient
		}
		act := int64(float64(b) * (in + 2*o) * float64(p.act)) // input, pre-activation and activation
		out = append(out, Cost{Params: int64(in*o + o), F: g, B: bi, W: g, GEMM: g, ActBytes: act, WorkBytes: act})
	}
	return out
}

// Params returns the model's parameter count (tied embeddings counted once).
func (m *Model) Params() int64 {
	if m.Kind == "mlp" {
		var n int64
		for _, c := range m.mlpCosts(1) {
			n += c.Params
		}
		return n
	}
	h, v, s := int64(m.DModel), int64(m.Vocab), int64(m.Seq)
	n := int64(m.Layers)*m.blockCost(1, 1).Params + v*h + s*h + 2*h
	if !m.tied() {
		n += v * h
	}
	return n
}

// TrainFLOPs returns the FLOPs of one training step as Narayanan et al.
// 2021 count them (eq. 3 for a GPT: 96·B·s·l·h²·(1 + s/6h + V/16lh) with
// full recomputation, 72·… without): what a published "teraFLOP/s per
// GPU" divides by the step time.
func (m *Model) TrainFLOPs() float64 {
	b := m.GlobalBatch
	if m.Kind == "mlp" {
		var f float64
		for _, c := range m.mlpCosts(b) {
			f += c.F + c.B + c.W
		}
		return f
	}
	blk := m.blockCost(b, 1)
	per := blk.F + blk.B + blk.W
	if m.Recompute {
		per += blk.F
	}
	hd := m.headCost(b, 1)
	return float64(m.Layers)*per + hd.F + hd.B + hd.W
}

// Tokens returns the tokens (samples, for an MLP) of one step.
func (m *Model) Tokens() int64 {
	if m.Kind == "mlp" {
		return int64(m.GlobalBatch)
	}
	return int64(m.GlobalBatch) * int64(m.Seq)
}

// Describe is the accounting of m as text: parameters, FLOPs per token of
// one block (or layer) by pass, activation bytes per sequence, and the
// training FLOPs of a step.
func Describe(m *Model) string {
	var b strings.Builder
	pr := m.precision()
	if m.Kind == "mlp" {
		fmt.Fprintf(&b, "model %s: mlp %v, batch %d, %s\n", m.Name, m.Widths, m.GlobalBatch, pr.dtype)
		fmt.Fprintf(&b, "parameters %d\n", m.Params())
		for i, c := range m.mlpCosts(1) {
			fmt.Fprintf(&b, "layer %d per sample: forward %.0f backward-input %.0f backward-weight %.0f FLOPs, activations %d bytes\n", i, c.F, c.B, c.W, c.ActBytes)
		}
	} else {
		tied := "tied"
		if !m.tied() {
			tied = "untied"
		}
		fmt.Fprintf(&b, "model %s: gpt, %d layers, d_model %d, %d heads, ffn %d, seq %d, vocab %d, %s embeddings, batch %d, %s\n",
			m.Name, m.Layers, m.DModel, m.Heads, m.ffn(), m.Seq, m.Vocab, tied, m.GlobalBatch, pr.dtype)
		fmt.Fprintf(&b, "parameters %d (per block %d)\n", m.Params(), m.blockCost(1, 1).Params)
		s := float64(m.Seq)
		blk := m.blockCost(1, 1)
		fmt.Fprintf(&b, "block per token: forward %.0f backward-input %.0f backward-weight %.0f FLOPs\n", blk.F/s, blk.B/s, blk.W/s)
		hd := m.headCost(1, 1)
		fmt.Fprintf(&b, "head per token: forward %.0f backward-input %.0f backward-weight %.0f FLOPs\n", hd.F/s, hd.B/s, hd.W/s)
		full := *m
		full.Recompute = false
		rec := *m
		rec.Recompute = true
		for _, t := range []int{1, 2, 4, 8} {
			if m.Heads%t != 0 {
				continue
			}
			fmt.Fprintf(&b, "block activations per sequence, tp %d: %d bytes (recompute: %d)\n", t, full.blockCost(1, t).ActBytes, rec.blockCost(1, t).ActBytes)
		}
	}
	fmt.Fprintf(&b, "parameter bytes %d, with gradients and optimizer state %d\n", m.Params()*pr.param, m.Params()*(pr.param+pr.grad+pr.opt))
	fmt.Fprintf(&b, "training FLOPs per step %.4g (%.4g per token)\n", m.TrainFLOPs(), m.TrainFLOPs()/float64(m.Tokens()))
	return b.String()
}
