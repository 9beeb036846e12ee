package tp

import (
	"context"
	"fmt"
	"math"

	"github.com/cohortml/cohort/autograd"
	"github.com/cohortml/cohort/distributed"
	"github.com/cohortml/cohort/nn"
	"github.com/cohortml/cohort/optim"
	"github.com/cohortml/cohort/tensor"
)

// Placement says how a parameter of the full model is laid out across the
// ranks of a tensor-parallel group. The zero value is replicated: every
// rank holds the whole tensor.
//
// A sharded tensor is split along dimension Dim. With Blocks > 1 the
// dimension is first cut into Blocks equal blocks (q | k | v of a fused
// attention projection) and every block is split across the ranks; rank r
// holds chunk r of each block, concatenated in block order.
type Placement struct {
	Sharded bool
	Dim     int
	Blocks  int // 0 means 1
}

// Replicated is the placement of a parameter every rank holds whole.
var Replicated = Placement{}

// ShardedOn returns the placement split along dim in blocks blocks.
func ShardedOn(dim, blocks int) Placement { return Placement{Sharded: true, Dim: dim, Blocks: blocks} }

func (p Placement) blocks() int { return max(p.Blocks, 1) }

func (p Placement) String() string {
	switch {
	case !p.Sharded:
		return "replicated"
	case p.blocks() > 1:
		return fmt.Sprintf("sharded on dim %d in %d blocks", p.Dim, p.blocks())
	}
	return fmt.Sprintf("sharded on dim %d", p.Dim)
}

// check returns an error unless a full tensor of this shape splits evenly
// across n ranks.
func (p Placement) check(shape []int, n int) error {
	if !p.Sharded {
		return nil
	}
	if p.Dim < 0 || p.Dim >= len(shape) {
		return fmt.Errorf("tp: placement %v does not fit shape %v", p, shape)
	}
	if shape[p.Dim]%(p.blocks()*n) != 0 {
		return fmt.Errorf("tp: dimension %d of shape %v (size %d) does not split into %d block(s) across %d ranks",
			p.Dim, shape, shape[p.Dim], p.blocks(), n)
	}
	return nil
}

// Shard returns rank's shard of full (a new tensor) under this placement
// across n ranks. It panics when full does not split evenly (see check).
func (p Placement) Shard(full *tensor.Tensor, rank, n int) *tensor.Tensor {
	if err := p.check(full.Shape(), n); err != nil {
		panic(err.Error())
	}
	if !p.Sharded {
		return full.Clone()
	}
	bs := full.Dim(p.Dim) / p.blocks()
	cs := bs / n
	shape := append([]int(nil), full.Shape()...)
	shape[p.Dim] = cs * p.blocks()
	out := tensor.New(shape...)
	for b := range p.blocks() {
		out.Narrow(p.Dim, b*cs, cs).CopyFrom(full.Narrow(p.Dim, b*bs+rank*cs, cs))
	}
	return out
}

// Unshard joins the shards of every rank (in rank order) into the full
// tensor: the inverse of Shard. A replicated placement returns a copy of
// shards[0].
func (p Placement) Unshard(shards []*tensor.Tensor) *tensor.Tensor {
	if !p.Sharded {
		return shards[0].Clone()
	}
	n := len(shards)
	cs := shards[0].Dim(p.Dim) / p.blocks()
	shape := append([]int(nil), shards[0].Shape()...)
	shape[p.Dim] = cs * p.blocks() * n
	out := tensor.New(shape...)
	bs := cs * n
	for r, s := range shards {
		for b := range p.blocks() {
			out.Narrow(p.Dim, b*bs+r*cs, cs).CopyFrom(s.Narrow(p.Dim, b*cs, cs))
		}
	}
	return out
}

// Shard is a parameter of a tensor-parallel module: its name (the name of
// the full parameter in the unsharded model), this rank's tensor and its
// placement.
type Shard struct {
	Name      string
	Param     *autograd.Var
	Placement Placement
}

// Module is a tensor-parallel module: an nn.Module whose parameters know
// their placement.
type Module interface {
	nn.Module
	// Shards lists the parameters in NamedParameters order.
	Shards() []Shard
}

// childShards lists the children's shards, each name prefixed with its
// child's name and a dot (as nn.ChildParameters).
func childShards(children ...child) []Shard {
	var out []Shard
	for _, c := range children {
		for _, s := range c.m.Shards() {
			s.Name = c.name + "." + s.Name
			out = append(out, s)
		}
	}
	return out
}

type child struct {
	name string
	m    Module
}

// namedParameters turns shards into nn's parameter list.
func namedParameters(shards []Shard) []nn.NamedParameter {
	out := make([]nn.NamedParameter, len(shards))
	for i, s := range shards {
		out[i] = nn.NamedParameter{Name: s.Name, Param: s.Param}
	}
	return out
}

// FullStateDict all-gathers the shards and returns the full parameters by
// name, as the unsharded model's nn.StateDict would hold them (so
// nn.LoadStateDict can load them into it). It is a collective op of c's
// group: every rank must call it with the same shards (same names, shapes
// and placements, in the same order); every rank gets the full tensors.
func FullStateDict(ctx context.Context, c *Comm, shards []Shard) (map[string]*tensor.Tensor, error) {
	n := c.Size()
	out := make(map[string]*tensor.Tensor, len(shards))
	for _, s := range shards {
		v := s.Param.Value
		if !s.Placement.Sharded || n == 1 {
			out[s.Name] = v.Clone()
			continue
		}
		in := v.Contiguous()
		all := tensor.New(append([]int{n}, v.Shape()...)...)
		if err := c.pg.AllGather(ctx, distributed.FromTensor(all), distributed.FromTensor(in)).Wait(); err != nil {
			return nil, fmt.Errorf("tp: gathering parameter %s: %w", s.Name, err)
		}
		parts := make([]*tensor.Tensor, n)
		for r := range parts {
			parts[r] = all.Select(0, r)
		}
		out[s.Name] = s.Placement.Unshard(parts)
	}
	return out, nil
}

// LoadFull copies rank c.Rank()'s shard of every full tensor in sd (keyed
// by the full parameter names, e.g. nn.StateDict of the unsharded model)
// into the shards, in place. It checks every shard first and copies
// nothing when one is missing or has the wrong shape; it needs no
// communication.
func LoadFull(c *Comm, shards []Shard, sd map[string]*tensor.Tensor) error {
	parts := make([]*tensor.Tensor, len(shards))
	for i, s := range shards {
		full, ok := sd[s.Name]
		if !ok {
			return fmt.Errorf("tp: LoadFull: no tensor %q", s.Name)
		}
		if err := s.Placement.check(full.Shape(), c.Size()); err != nil {
			return fmt.Errorf("tp: LoadFull: %s: %w", s.Name, err)
		}
		p := s.Placement.Shard(full, c.Rank(), c.Size())
		if !p.SameShape(s.Param.Value) {
			return fmt.Errorf("tp: LoadFull: %s: full shape %v gives shard %v on rank %d, the module has %v",
				s.Name, full.Shape(), p.Shape(), c.Rank(), s.Param.Value.Shape())
		}
		parts[i] = p
	}
	for i, s := range shards {
		s.Param.Value.CopyFrom(parts[i])
	}
	return nil
}

// SumSquares returns the sums of squared gradient elements of the sharded
// parameters and of the replicated ones, separately, in float64 (nil
// gradients count as zero). The squared 2-norm of the full model's
// gradient is the sum over the tensor-parallel ranks of the first plus the
// second (the same on every rank) counted once; a pipeline would add up
// its stages' totals the same way.
func SumSquares(shards []Shard) (sharded, replicated float64) {
	for _, s := range shards {
		g := s.Param.Grad
		if g == nil {
			continue
		}
		var acc float64
		for _, v := range g.Contiguous().Data() {
			acc += float64(v) * float64(v)
		}
		if s.Placement.Sharded {
			sharded += acc
		} else {
			replicated += acc
		}
	}
	return sharded, replicated
}

// ClipGradNorm scales the shards' gradients in place so that the 2-norm
// of the full model's gradient is at most maxNorm, and returns that norm
// before scaling, exactly as optim.ClipGradNorm(params, maxNorm, 2) does on
// the unsharded model: sharded parameters contribute their shard on every
// rank, replicated ones are counted once. The scale is maxNorm/(norm+1e-6)
// when below 1. It is a collective op of c's group (one all-reduce). A
// non-finite norm leaves the gradients unchanged and returns an error
// wrapping optim.ErrNonFiniteNorm.
func ClipGradNorm(ctx context.Context, c *Comm, shards []Shard, maxNorm float64) (float64, error) {
	if math.IsNaN(maxNorm) || maxNorm < 0 {
		return 0, fmt.Errorf("tp: ClipGradNorm: maxNorm = %v, want >= 0", maxNorm)
	}
	sh, rep := SumSquares(shards)
	buf := []float64{sh}
	if c.Size() > 1 {
		if err := c.pg.AllReduce(ctx, distributed.F64(buf), distributed.Sum).Wait(); err != nil {
			return 0, fmt.Errorf("tp: ClipGradNorm: %w", err)
		}
	}
	total := math.Sqrt(buf[0] + rep)
	if math.IsNaN(total) || math.IsInf(total, 0) {
		return total, fmt.Errorf("tp: ClipGradNorm: gradient 2-norm is %v: %w", total, optim.ErrNonFiniteNorm)
	}
	ScaleGrads(shards, maxNorm/(total+1e-6))
	return total, nil
}

// ScaleGrads multiplies every gradient by coef when coef < 1 (the clipping
// step of ClipGradNorm, for callers that combine the norm themselves).
func ScaleGrads(shards []Shard, coef float64) {
	if coef >= 1 {
		return
	}
	c := float32(coef)
	for _, s := range shards {
		if s.Param.Grad != nil {
			tensor.ScaleInto(s.Param.Grad, s.Param.Grad, c)
		}
	}
}
