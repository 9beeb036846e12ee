package tp

import (
	"context"
	"fmt"
	"slices"
	"strconv"

	"github.com/cohortml/cohort/autograd"
	"github.com/cohortml/cohort/models"
	"github.com/cohortml/cohort/nn"
)

// GPTStage is the part of a tensor-parallel GPT that one pipeline stage
// runs (models.GPTStage with tensor-parallel pieces): blocks [Lo, Hi) as
// Blocks, preceded on the first stage by the vocabulary-parallel token
// embedding and the replicated position embedding, and followed on the
// last stage by the final LayerNorm, the tied vocabulary-parallel head and
// the vocab-parallel cross-entropy. Its Forward and Parameters methods
// make it a pipeline.Stage; the activation between stages, [b, T, D], is
// replicated over the tensor-parallel group, and so is its gradient.
//
// Parameter names are models.GPT's ("wte" on the first and on the last
// stage, "wpe", "h.<i>.…", "ln_f.*"), each holding this rank's shard.
//
// Every tensor-parallel rank of a stage must call Forward and run the
// backward passes in the same order (they run collectives); ranks of one
// pipeline coordinate run the same schedule, so they do.
type GPTStage struct {
	Config      models.GPTConfig
	Lo, Hi      int
	First, Last bool

	Wte    *VocabEmbedding // the token embedding (first stage) and the tied head (last stage); nil elsewhere
	Wpe    *autograd.Var   // first stage only
	Blocks []*Block        // blocks Lo … Hi−1
	LNF    *nn.LayerNorm   // last stage only

	comm *Comm

	ctx          context.Context
	idx, targets []int64
	b, t         int // microbatch rows and sequence length
	microbatches int
}

// NewGPTStages shards the stages want of full, a model cut into stages
// at the bounds split (stage s holds blocks [split[s], split[s+1]); see
// pipeline.Uniform), across c's ranks, and returns them in the order of
// want. Only the blocks of those stages are sharded. When want holds both
// the first and the last stage they share one VocabEmbedding, the tied
// token embedding and head; otherwise each has its own copy, to be kept
// equal by summing the two gradients (pipeline.Options.Tied). It returns
// an error naming the sizes when the model does not split across c's ranks
// (CheckConfig) or the split does not fit the model. No communication.
func NewGPTStages(c *Comm, full *models.GPT, split []int, want []int) ([]*GPTStage, error) {
	if err := CheckConfig(full.Config, c.Size()); err != nil {
		return nil, err
	}
	n := len(split) - 1
	if n < 1 || split[0] != 0 || split[n] != len(full.Blocks) {
		return nil, fmt.Errorf("tp: GPT stages: split %v does not cover the %d blocks", split, len(full.Blocks))
	}
	for s := range n {
		if split[s+1] < split[s] {
			return nil, fmt.Errorf("tp: GPT stages: split %v is not increasing at stage %d", split, s)
		}
	}
	var wte *VocabEmbedding
	out := make([]*GPTStage, 0, len(want))
	for _, s := range want {
		if s < 0 || s >= n {
			return nil, fmt.Errorf("tp: GPT stages: stage %d of %d", s, n)
		}
		st := &GPTStage{Config: full.Config, Lo: split[s], Hi: split[s+1], First: s == 0, Last: s == n-1, comm: c}
		if st.First || st.Last {
			if wte == nil {
				w, err := NewVocabEmbedding(c, full.Wte.Value)
				if err != nil {
					return nil, err
				}
				wte = w
			}
			st.Wte = wte
		}
		if st.First {
			st.Wpe = autograd.NewVar(full.Wpe.Value.Clone(), true)
		}
		for i := st.Lo; i < st.Hi; i++ {
			b, err := NewBlock(c, full.Blocks[i])
			if err != nil {
				return nil, fmt.Errorf("tp: GPT block %d: %w", i, err)
			}
			st.Blocks = append(st.Blocks, b)
		}
		if st.Last {
			st.LNF = cloneLayerNorm(full.LNF)
		}
		out = append(out, st)
	}
	return out, nil
}

// Comm returns the stage's tensor-parallel group.
func (s *GPTStage) Comm() *Comm { return s.comm }

// SetBatch gives the stage the step's batch: B·T token ids and, for the
// last stage, their next-token targets (either may be nil where the stage
// does not read it), cut into microbatches of B/microbatches whole
// sequences. ctx bounds the collectives of the forward passes that follow
// and of the backward passes recorded by them. idx and targets must not
// change until the step is over.
func (s *GPTStage) SetBatch(ctx context.Context, idx, targets []int64, B, T, microbatches int) error {
	if microbatches < 1 || B < 1 || B%microbatches != 0 {
		return fmt.Errorf("tp: GPT stage: %d microbatches do not divide a batch of %d", microbatches, B)
	}
	if T <= 0 || T > s.Config.Ctx {
		return fmt.Errorf("tp: GPT stage: sequence length %d, context %d", T, s.Config.Ctx)
	}
	if s.First && len(idx) != B*T {
		return fmt.Errorf("tp: GPT stage: %d token ids for batch %d × length %d", len(idx), B, T)
	}
	if s.Last && len(targets) != B*T {
		return fmt.Errorf("tp: GPT stage: %d targets for batch %d × length %d", len(targets), B, T)
	}
	s.ctx, s.idx, s.targets = ctx, idx, targets
	s.b, s.t, s.microbatches = B/microbatches, T, microbatches
	return nil
}

// Forward runs the stage on microbatch mb: in is the previous stage's
// output [b, T, D], replicated (nil on the first stage). The last stage
// returns the microbatch's mean cross-entropy (replicated), every other
// stage its output [b, T, D] (replicated). It returns the group's error if
// a collective failed, now or in an earlier backward pass.
func (s *GPTStage) Forward(mb int, in *autograd.Var) (*autograd.Var, error) {
	if mb < 0 || mb >= s.microbatches {
		return nil, fmt.Errorf("tp: GPT stage: microbatch %d of %d (SetBatch first)", mb, s.microbatches)
	}
	if err := s.comm.Err(); err != nil {
		return nil, err
	}
	ctx := s.ctx
	n := s.b * s.t
	h := in
	if s.First {
		h = embed(ctx, s.Wte, s.Wpe, s.idx[mb*n:(mb+1)*n], s.b, s.t)
	} else if in == nil {
		return nil, fmt.Errorf("tp: GPT stage [%d, %d): no input", s.Lo, s.Hi)
	}
	h = forwardBlocks(ctx, s.Blocks, h)
	if !s.Last {
		return h, s.comm.Err()
	}
	logits := head(ctx, s.comm, s.LNF, s.Wte, h)
	autograd.Transient(logits) // read only by the loss
	Vl := logits.Value.Dim(-1)
	loss := CrossEntropy(ctx, s.comm, autograd.Reshape(logits, -1, Vl), s.targets[mb*n:(mb+1)*n])
	return loss, s.comm.Err()
}

// Shards lists the stage's parameters with their placements, named as in
// models.GPT: "wte" and "wpe" on the first stage, its blocks, and "ln_f.*"
// and "wte" (the tied head, unless the stage is also the first) on the
// last.
func (s *GPTStage) Shards() []Shard {
	var out []Shard
	if s.First {
		out = append(out, Shard{"wte", s.Wte.Weight, ShardedOn(0, 1)}, Shard{"wpe", s.Wpe, Replicated})
	}
	for i, b := range s.Blocks {
		out = append(out, childShards(child{"h." + strconv.Itoa(s.Lo+i), b})...)
	}
	if s.Last {
		out = append(out, childShards(child{"ln_f", replicated{s.LNF}})...)
		if !s.First {
			out = append(out, Shard{"wte", s.Wte.Weight, ShardedOn(0, 1)})
		}
	}
	return out
}

// Parameters returns the Vars of Shards.
func (s *GPTStage) Parameters() []*autograd.Var {
	var vs []*autograd.Var
	for _, sh := range s.Shards() {
		vs = append(vs, sh.Param)
	}
	return vs
}

func (s *GPTStage) NamedParameters() []nn.NamedParameter { return namedParameters(s.Shards()) }
func (s *GPTStage) NamedBuffers() []nn.NamedBuffer       { return nil }
func (s *GPTStage) SetTraining(bool)                     {}

var _ Module = (*GPTStage)(nil)

// StageShards lists the distinct parameters of stages (one rank's
// stages), in stage order, each Var once.
func StageShards(stages []*GPTStage) []Shard {
	var out []Shard
	var seen []*autograd.Var
	for _, st := range stages {
		for _, sh := range st.Shards() {
			if !slices.Contains(seen, sh.Param) {
				seen = append(seen, sh.Param)
				out = append(out, sh)
			}
		}
	}
	return out
}
