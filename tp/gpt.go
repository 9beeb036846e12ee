package tp

import (
	"context"
	"fmt"
	"strconv"

	"github.com/cohortml/cohort/autograd"
	"github.com/cohortml/cohort/distributed"
	"github.com/cohortml/cohort/models"
	"github.com/cohortml/cohort/nn"
	"github.com/cohortml/cohort/tensor"
)

// GPT is models.GPT split across a tensor-parallel group: the token
// embedding (and with it the tied output head) by vocabulary, every
// block's attention by heads and its MLP by hidden features; the position
// embedding and the LayerNorms are replicated. Its logits are
// vocabulary-parallel ([B, T, V/n] on each rank) and Loss is the
// vocab-parallel cross-entropy, so the full logits are never formed.
//
// Parameter names are models.GPT's ("wte", "wpe", "h.0.attn.qkv.weight",
// …), each holding this rank's shard (see Shards for the placements);
// FullStateDict gathers the full tensors under the same names.
//
// A GPT is used by one goroutine per rank; every rank of the group must
// call Forward, Loss, Backward, ClipGradNorm and FullStateDict in the same
// order (they run collectives).
type GPT struct {
	Config models.GPTConfig
	Wte    *VocabEmbedding
	Wpe    *autograd.Var
	Blocks []*Block
	LNF    *nn.LayerNorm
	comm   *Comm
}

// CheckConfig returns an error naming the sizes unless a GPT of config cfg
// splits across n tensor-parallel ranks: heads, vocabulary and MLP hidden
// width (4·D) must all divide by n.
func CheckConfig(cfg models.GPTConfig, n int) error {
	switch {
	case n < 1:
		return fmt.Errorf("tp: %d tensor-parallel ranks", n)
	case cfg.NHead%n != 0:
		return fmt.Errorf("tp: GPT: %d heads do not split across %d tensor-parallel ranks", cfg.NHead, n)
	case cfg.Vocab%n != 0:
		return fmt.Errorf("tp: GPT: vocabulary %d does not split across %d tensor-parallel ranks", cfg.Vocab, n)
	case (4*cfg.D)%n != 0:
		return fmt.Errorf("tp: GPT: MLP hidden width %d does not split across %d tensor-parallel ranks", 4*cfg.D, n)
	}
	return nil
}

// NewGPT shards full across the ranks of pg (every rank passes a full
// model with the same weights, for example built from the same seed) and
// returns this rank's part. full is not used afterwards. It returns an
// error naming the sizes when the heads, the vocabulary or the MLP width
// do not split across pg.Size() ranks. It runs no collective.
func NewGPT(pg distributed.ProcessGroup, full *models.GPT) (*GPT, error) {
	c := NewComm(pg)
	if err := CheckConfig(full.Config, c.Size()); err != nil {
		return nil, err
	}
	wte, err := NewVocabEmbedding(c, full.Wte.Value)
	if err != nil {
		return nil, err
	}
	g := &GPT{
		Config: full.Config,
		Wte:    wte,
		Wpe:    autograd.NewVar(full.Wpe.Value.Clone(), true),
		LNF:    cloneLayerNorm(full.LNF),
		comm:   c,
	}
	for i, b := range full.Blocks {
		tb, err := NewBlock(c, b)
		if err != nil {
			return nil, fmt.Errorf("tp: GPT block %d: %w", i, err)
		}
		g.Blocks = append(g.Blocks, tb)
	}
	return g, nil
}

// Comm returns the model's tensor-parallel group.
func (g *GPT) Comm() *Comm { return g.comm }

// Forward returns this rank's vocabulary-parallel logits [B, T, V/n]
// (columns [r·V/n, (r+1)·V/n) of models.GPT.Forward's) for the token ids
// idx (B·T of them, row-major, the same on every rank). ctx bounds the
// forward collectives and the backward ones recorded now. It panics on bad
// sizes or ids, as models.GPT.Forward, and returns the group's error if a
// collective failed.
func (g *GPT) Forward(ctx context.Context, idx []int64, B, T int) (*autograd.Var, error) {
	if T <= 0 || T > g.Config.Ctx || B <= 0 || len(idx) != B*T {
		panic(fmt.Sprintf("tp: GPT.Forward: %d ids for batch %d × length %d (context %d)", len(idx), B, T, g.Config.Ctx))
	}
	h := embed(ctx, g.Wte, g.Wpe, idx, B, T)
	h = forwardBlocks(ctx, g.Blocks, h)
	return head(ctx, g.comm, g.LNF, g.Wte, h), g.comm.Err()
}

// embed returns wte[idx] + wpe[0:T], [B, T, D], replicated, as models.GPT
// does, marked Transient: read only by the first block.
func embed(ctx context.Context, wte *VocabEmbedding, wpe *autograd.Var, idx []int64, B, T int) *autograd.Var {
	// The looked-up rows are read by nothing but the add.
	h := sumInto("tp.AddPosition", wte.Lookup(ctx, idx, B, T), autograd.Narrow(wpe, 0, 0, T))
	autograd.Transient(h)
	return h
}

// forwardBlocks applies blocks to h, marking each block's output
// Transient but the last's.
func forwardBlocks(ctx context.Context, blocks []*Block, h *autograd.Var) *autograd.Var {
	for i, b := range blocks {
		if i > 0 {
			autograd.Transient(h) // read only by this block
		}
		h = b.Forward(ctx, h)
	}
	return h
}

// head returns the vocabulary-parallel logits LN_f(h) @ wte_rᵀ: the head
// shares wte, so this rank's vocabulary rows give its logit columns. h is
// marked Transient (read only by the head).
func head(ctx context.Context, c *Comm, lnf *nn.LayerNorm, wte *VocabEmbedding, h *autograd.Var) *autograd.Var {
	autograd.Transient(h)
	x := lnf.Forward(h)
	autograd.Transient(x) // read only by the projection
	return autograd.Linear(Copy(ctx, c, x), wte.Weight, nil)
}

// Loss returns the mean cross-entropy (replicated) of the
// vocabulary-parallel logits [B, T, V/n] against the next-token targets
// (B·T ids, row-major, the same on every rank).
func (g *GPT) Loss(ctx context.Context, logits *autograd.Var, targets []int64) (*autograd.Var, error) {
	Vl := logits.Value.Dim(-1)
	loss := CrossEntropy(ctx, g.comm, autograd.Reshape(logits, -1, Vl), targets)
	return loss, g.comm.Err()
}

// Backward runs autograd.Backward(loss) and returns the error of any
// collective that failed on the way.
func (g *GPT) Backward(loss *autograd.Var) error {
	autograd.Backward(loss)
	return g.comm.Err()
}

// ClipGradNorm clips the gradients to a full-model 2-norm of at most
// maxNorm (see the package-level ClipGradNorm) and returns the norm.
func (g *GPT) ClipGradNorm(ctx context.Context, maxNorm float64) (float64, error) {
	return ClipGradNorm(ctx, g.comm, g.Shards(), maxNorm)
}

// FullStateDict gathers the full parameters, named as models.GPT's (see
// the package-level FullStateDict).
func (g *GPT) FullStateDict(ctx context.Context) (map[string]*tensor.Tensor, error) {
	return FullStateDict(ctx, g.comm, g.Shards())
}

// GatherInto copies the full parameters into full, a models.GPT of the
// same config (for evaluation or a checkpoint). It is a collective op.
func (g *GPT) GatherInto(ctx context.Context, full *models.GPT) error {
	if full.Config != g.Config {
		return fmt.Errorf("tp: GatherInto: model config %+v, want %+v", full.Config, g.Config)
	}
	sd, err := g.FullStateDict(ctx)
	if err != nil {
		return err
	}
	return nn.LoadStateDict(full, sd)
}

// LoadFull copies this rank's shards of full's parameters into the model
// (resharding a checkpoint of the unsharded model). No communication.
func (g *GPT) LoadFull(full *models.GPT) error {
	if full.Config != g.Config {
		return fmt.Errorf("tp: LoadFull: model config %+v, want %+v", full.Config, g.Config)
	}
	return LoadFull(g.comm, g.Shards(), nn.StateDict(full))
}

// Shards lists the parameters with their placements, in the order and
// with the names of models.GPT.NamedParameters.
func (g *GPT) Shards() []Shard {
	s := []Shard{{"wte", g.Wte.Weight, ShardedOn(0, 1)}, {"wpe", g.Wpe, Replicated}}
	for i, b := range g.Blocks {
		s = append(s, childShards(child{"h." + strconv.Itoa(i), b})...)
	}
	return append(s, childShards(child{"ln_f", replicated{g.LNF}})...)
}

func (g *GPT) NamedParameters() []nn.NamedParameter { return namedParameters(g.Shards()) }
func (g *GPT) NamedBuffers() []nn.NamedBuffer       { return nil }
func (g *GPT) SetTraining(bool)                     {}

var _ Module = (*GPT)(nil)
