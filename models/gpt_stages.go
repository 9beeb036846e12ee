package models

import (
	"fmt"
	"strconv"

	"github.com/cohortml/cohort/autograd"
	"github.com/cohortml/cohort/nn"
)

// The pieces of GPT.Forward, for running a GPT in pipeline stages:
// Forward(idx) = Head(ForwardBlocks(Embed(idx), 0, NLayer)).

// Embed returns h = wte[idx] + wpe[0:T], [B, T, D]. It panics like Forward
// on bad sizes.
func (g *GPT) Embed(idx []int64, B, T int) *autograd.Var {
	if T <= 0 || T > g.Config.Ctx || B <= 0 || len(idx) != B*T {
		panic(fmt.Sprintf("models: GPT.Embed: %d ids for batch %d × length %d (context %d)", len(idx), B, T, g.Config.Ctx))
	}
	e := autograd.Embedding(g.Wte, idx, B, T)
	autograd.Transient(e) // read only by the add
	return autograd.Add(e, autograd.Narrow(g.Wpe, 0, 0, T))
}

// ForwardBlocks applies blocks [lo, hi) to h [B, T, D].
func (g *GPT) ForwardBlocks(h *autograd.Var, lo, hi int) *autograd.Var {
	if lo < 0 || hi > len(g.Blocks) || lo > hi {
		panic(fmt.Sprintf("models: GPT.ForwardBlocks: blocks [%d, %d) of %d", lo, hi, len(g.Blocks)))
	}
	for i, b := range g.Blocks[lo:hi] {
		if i > 0 {
			autograd.Transient(h) // read only by this block
		}
		h = b.Forward(h)
	}
	return h
}

// Head returns the logits LN_f(h) @ wteᵀ, [B, T, Vocab].
func (g *GPT) Head(h *autograd.Var) *autograd.Var {
	x := g.LNF.Forward(h)
	autograd.Transient(x) // read only by the projection
	return autograd.Linear(x, g.Wte, nil)
}

// ForwardThrough is Forward with every block run through run(i, h,
// block i's forward): a sharded wrapper's hook around each block
// (fsdp.Units.Run gathers the block's parameters before it and releases
// them after). run returns the block's output or a value sharing its
// storage (a marker of the wrapper); the outputs between blocks are
// transient as in Forward, so that a steady step reuses their storage.
func (g *GPT) ForwardThrough(idx []int64, B, T int, run func(i int, h *autograd.Var, f func(*autograd.Var) *autograd.Var) *autograd.Var) *autograd.Var {
	h := g.Embed(idx, B, T)
	autograd.Transient(h) // read only by the first block
	for i, b := range g.Blocks {
		h = run(i, h, func(x *autograd.Var) *autograd.Var {
			y := b.Forward(x)
			autograd.Transient(y) // read only by the next block or the head, through run's value
			return y
		})
	}
	return g.Head(h)
}

// GPTStage is the part of a GPT that one pipeline stage runs: blocks
// [Lo, Hi), preceded by the embeddings on the first stage and followed by
// the final LayerNorm, the tied head and the loss on the last. It holds
// the current batch, cut into microbatches of whole sequences. Its
// Forward and Parameters methods make it a pipeline.Stage.
type GPTStage struct {
	G           *GPT
	Lo, Hi      int
	First, Last bool

	idx, targets []int64
	b, t         int // microbatch rows and sequence length
	microbatches int
}

// NewStage returns the stage of g running blocks [lo, hi); first and last
// say whether it also runs the embeddings, or the head and loss.
func (g *GPT) NewStage(lo, hi int, first, last bool) (*GPTStage, error) {
	if lo < 0 || hi > len(g.Blocks) || lo > hi {
		return nil, fmt.Errorf("models: GPT stage: blocks [%d, %d) of %d", lo, hi, len(g.Blocks))
	}
	return &GPTStage{G: g, Lo: lo, Hi: hi, First: first, Last: last}, nil
}

// SetBatch gives the stage the step's batch: B·T token ids and, for the
// last stage, their next-token targets (either may be nil where the stage
// does not read it), cut into microbatches of B/microbatches sequences.
func (s *GPTStage) SetBatch(idx, targets []int64, B, T, microbatches int) error {
	if microbatches < 1 || B < 1 || B%microbatches != 0 {
		return fmt.Errorf("models: GPT stage: %d microbatches do not divide a batch of %d", microbatches, B)
	}
	if T <= 0 || T > s.G.Config.Ctx {
		return fmt.Errorf("models: GPT stage: sequence length %d, context %d", T, s.G.Config.Ctx)
	}
	if s.First && len(idx) != B*T {
		return fmt.Errorf("models: GPT stage: %d token ids for batch %d × length %d", len(idx), B, T)
	}
	if s.Last && len(targets) != B*T {
		return fmt.Errorf("models: GPT stage: %d targets for batch %d × length %d", len(targets), B, T)
	}
	s.idx, s.targets = idx, targets
	s.b, s.t, s.microbatches = B/microbatches, T, microbatches
	return nil
}

// Forward runs the stage on microbatch mb: in is the previous stage's
// output [b, T, D] (nil on the first stage). The last stage returns the
// microbatch's mean cross-entropy.
func (s *GPTStage) Forward(mb int, in *autograd.Var) (*autograd.Var, error) {
	if mb < 0 || mb >= s.microbatches {
		return nil, fmt.Errorf("models: GPT stage: microbatch %d of %d (SetBatch first)", mb, s.microbatches)
	}
	n := s.b * s.t
	h := in
	if s.First {
		h = s.G.Embed(s.idx[mb*n:(mb+1)*n], s.b, s.t)
		autograd.Transient(h) // read only by the first block
	} else if in == nil {
		return nil, fmt.Errorf("models: GPT stage [%d, %d): no input", s.Lo, s.Hi)
	}
	h = s.G.ForwardBlocks(h, s.Lo, s.Hi)
	if !s.Last {
		return h, nil
	}
	autograd.Transient(h) // read only by the head
	logits := s.G.Head(h)
	autograd.Transient(logits) // read only by the loss
	return s.G.Loss(logits, s.targets[mb*n:(mb+1)*n]), nil
}

// NamedParameters returns the parameters the stage uses, named as in
// the GPT: "wte" and "wpe" on the first stage, its blocks, and "ln_f.*"
// and "wte" (the tied head) on the last.
func (s *GPTStage) NamedParameters() []nn.NamedParameter {
	var ps []nn.NamedParameter
	if s.First {
		ps = append(ps, nn.NamedParameter{Name: "wte", Param: s.G.Wte}, nn.NamedParameter{Name: "wpe", Param: s.G.Wpe})
	}
	for i := s.Lo; i < s.Hi; i++ {
		ps = append(ps, nn.ChildParameters(nn.Child{Name: "h." + strconv.Itoa(i), Module: s.G.Blocks[i]})...)
	}
	if s.Last {
		ps = append(ps, nn.ChildParameters(nn.Child{Name: "ln_f", Module: s.G.LNF})...)
		if !s.First {
			ps = append(ps, nn.NamedParameter{Name: "wte", Param: s.G.Wte})
		}
	}
	return ps
}

// Parameters returns the Vars of NamedParameters.
func (s *GPTStage) Parameters() []*autograd.Var {
	var vs []*autograd.Var
	for _, p := range s.NamedParameters() {
		vs = append(vs, p.Param)
	}
	return vs
}
