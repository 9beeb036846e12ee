package tp_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/cohortml/cohort/autograd"
	"github.com/cohortml/cohort/distributed"
	"github.com/cohortml/cohort/distributed/distributedtest"
	"github.com/cohortml/cohort/models/gpttest"
	"github.com/cohortml/cohort/nn"
	"github.com/cohortml/cohort/tensor"
	"github.com/cohortml/cohort/tp"
)

// input is a leaf of a distributed gradient check: replicated (every rank
// holds the same values) or sharded (each rank its own).
type input struct {
	v          *autograd.Var
	replicated bool
}

// randVar returns a leaf of the given shape drawn from rng.
func randVar(rng *rand.Rand, shape ...int) *autograd.Var {
	x := tensor.New(shape...)
	x.FillNormal(rng, 0, 1)
	return autograd.NewVar(x, true)
}

// distGradCheck compares Backward's gradients with central finite
// differences of the global objective L = Σ out·dout, where out = f() is
// replicated (counted once) or sharded (summed over the ranks). A
// replicated input is perturbed on every rank at once and each rank's
// gradient must match; a sharded input is perturbed on one rank at a time
// and that rank's gradient must match. Every rank runs the same sequence
// of evaluations, so the collectives inside f stay in step.
func distGradCheck(t *testing.T, ctx context.Context, c *tp.Comm, seed uint64, inputs []input, outReplicated bool, f func() *autograd.Var) {
	t.Helper()
	const h = 1e-2
	rank, n := c.Rank(), c.Size()
	out := f()
	// dout: the same on every rank for a replicated output.
	dseed := seed
	if !outReplicated {
		dseed += uint64(rank) + 1
	}
	dout := tensor.New(out.Value.Shape()...)
	dout.FillNormal(rand.New(rand.NewPCG(dseed, 99)), 0, 1)
	autograd.BackwardGrad(out, dout)
	if err := c.Err(); err != nil {
		t.Fatalf("rank %d: backward: %v", rank, err)
	}
	eval := func() float64 {
		o := f().Value.Contiguous().Data()
		buf := []float64{0}
		for i, d := range dout.Contiguous().Data() {
			buf[0] += float64(o[i]) * float64(d)
		}
		if !outReplicated && n > 1 {
			if err := c.Group().AllReduce(ctx, distributed.F64(buf), distributed.Sum).Wait(); err != nil {
				t.Fatalf("rank %d: objective all-reduce: %v", rank, err)
			}
		}
		return buf[0]
	}
	for k, in := range inputs {
		g := in.v.Grad
		if g == nil || !g.SameShape(in.v.Value) {
			t.Fatalf("rank %d: input %d: gradient %v for value shape %v", rank, k, g, in.v.Value.Shape())
		}
		owners := []int{-1} // every rank at once
		if !in.replicated {
			owners = distributedtest.Ranks(n)
		}
		x := in.v.Value.Data()
		gd := g.Contiguous().Data()
		bad := 0
		for _, owner := range owners {
			for e := range x {
				mine := owner < 0 || owner == rank
				old := x[e]
				if mine {
					x[e] = old + h
				}
				fp := eval()
				if mine {
					x[e] = old - h
				}
				fm := eval()
				x[e] = old
				if !mine {
					continue
				}
				num := (fp - fm) / (2 * h)
				ana := float64(gd[e])
				if math.Abs(num-ana) > 2e-3*(1+math.Abs(num)) {
					if bad < 4 {
						t.Errorf("rank %d: input %d element %d: analytic %.6g, numeric %.6g", rank, k, e, ana, num)
					}
					bad++
				}
			}
		}
	}
}

// TestGradCheck checks the conjugate collectives and the parallel layers
// built from them against finite differences, over 1 to 3 ranks.
func TestGradCheck(t *testing.T) {
	type testCase struct {
		name string
		// build returns the inputs, whether the output is replicated, and f.
		build func(ctx context.Context, c *tp.Comm, rng, shared *rand.Rand) ([]input, bool, func() *autograd.Var)
	}
	cases := []testCase{
		{"copy", func(ctx context.Context, c *tp.Comm, rng, shared *rand.Rand) ([]input, bool, func() *autograd.Var) {
			// f then a per-rank weight: the replicated x gets every shard's
			// contribution through Copy's backward all-reduce.
			x, w := randVar(shared, 3, 4), randVar(rng, 2, 4)
			return []input{{x, true}, {w, false}}, false, func() *autograd.Var {
				return autograd.Tanh(autograd.Linear(tp.Copy(ctx, c, x), w, nil))
			}
		}},
		{"reduce", func(ctx context.Context, c *tp.Comm, rng, shared *rand.Rand) ([]input, bool, func() *autograd.Var) {
			x := randVar(rng, 3, 4)
			return []input{{x, false}}, true, func() *autograd.Var {
				return autograd.Tanh(tp.Reduce(ctx, c, autograd.Scale(x, 0.5)))
			}
		}},
		{"gather", func(ctx context.Context, c *tp.Comm, rng, shared *rand.Rand) ([]input, bool, func() *autograd.Var) {
			x := randVar(rng, 2, 3, 2)
			return []input{{x, false}}, true, func() *autograd.Var {
				return autograd.Square(tp.Gather(ctx, c, x))
			}
		}},
		{"split", func(ctx context.Context, c *tp.Comm, rng, shared *rand.Rand) ([]input, bool, func() *autograd.Var) {
			x := randVar(shared, 3, 2*c.Size())
			return []input{{x, true}}, false, func() *autograd.Var {
				return autograd.Square(tp.Split(ctx, c, x))
			}
		}},
		{"column_row", func(ctx context.Context, c *tp.Comm, rng, shared *rand.Rand) ([]input, bool, func() *autograd.Var) {
			// The Megatron MLP pattern, plus a gathered column layer.
			n := c.Size()
			col, err := tp.NewColumnParallelLinear(c, nn.NewLinear(shared, 4, 2*n, true), false)
			if err != nil {
				t.Fatal(err)
			}
			row, err := tp.NewRowParallelLinear(c, nn.NewLinear(shared, 2*n, 3, true), true)
			if err != nil {
				t.Fatal(err)
			}
			gcol, err := tp.NewColumnParallelLinear(c, nn.NewLinear(shared, 3, 2*n, true), true)
			if err != nil {
				t.Fatal(err)
			}
			row2, err := tp.NewRowParallelLinear(c, nn.NewLinear(shared, 2*n, 2, false), false)
			if err != nil {
				t.Fatal(err)
			}
			x := randVar(shared, 2, 4)
			ins := []input{{x, true}}
			for _, m := range []tp.Module{col, row, gcol, row2} {
				for _, s := range m.Shards() {
					ins = append(ins, input{s.Param, !s.Placement.Sharded})
				}
			}
			return ins, true, func() *autograd.Var {
				y := row.Forward(ctx, autograd.GELUTanh(col.Forward(ctx, x)))
				return row2.Forward(ctx, autograd.Tanh(gcol.Forward(ctx, y)))
			}
		}},
		{"vocab_embedding", func(ctx context.Context, c *tp.Comm, rng, shared *rand.Rand) ([]input, bool, func() *autograd.Var) {
			full := tensor.New(3*c.Size(), 2)
			full.FillNormal(shared, 0, 1)
			e, err := tp.NewVocabEmbedding(c, full)
			if err != nil {
				t.Fatal(err)
			}
			ids := []int64{0, int64(3*c.Size() - 1), 1, 1, int64(c.Size())}
			return []input{{e.Weight, false}}, true, func() *autograd.Var {
				return autograd.Square(e.Lookup(ctx, ids))
			}
		}},
		{"cross_entropy", func(ctx context.Context, c *tp.Comm, rng, shared *rand.Rand) ([]input, bool, func() *autograd.Var) {
			x := randVar(rng, 4, 3)
			tgt := []int64{0, int64(3*c.Size() - 1), 2, int64(c.Size())}
			return []input{{x, false}}, true, func() *autograd.Var {
				return tp.CrossEntropy(ctx, c, x, tgt)
			}
		}},
	}
	for _, world := range []int{1, 2, 3} {
		for _, tc := range cases {
			t.Run(fmt.Sprintf("world=%d/%s", world, tc.name), func(t *testing.T) {
				distributedtest.Run(t, world, func(t *testing.T, pg distributed.ProcessGroup) {
					ctx := distributedtest.Context(t, time.Minute)
					c := tp.NewComm(pg)
					rng := rand.New(rand.NewPCG(uint64(pg.Rank())+10, 1))
					shared := rand.New(rand.NewPCG(7, 7))
					ins, repl, f := tc.build(ctx, c, rng, shared)
					distGradCheck(t, ctx, c, 5, ins, repl, f)
				})
			})
		}
	}
}

// TestCrossEntropyMatchesFull: the vocab-parallel cross-entropy equals
// autograd.CrossEntropy on the gathered logits, in value and gradient.
func TestCrossEntropyMatchesFull(t *testing.T) {
	const N, V = 6, 12
	rng := rand.New(rand.NewPCG(3, 3))
	full := tensor.New(N, V)
	full.FillNormal(rng, 0, 3)
	tgt := []int64{0, 11, 5, 6, 3, 9}
	fv := autograd.NewVar(full, true)
	ref := autograd.CrossEntropy(fv, tgt, autograd.CrossEntropyOptions{})
	autograd.Backward(ref)
	for _, world := range []int{1, 2, 3, 4} {
		t.Run(fmt.Sprintf("world=%d", world), func(t *testing.T) {
			distributedtest.Run(t, world, func(t *testing.T, pg distributed.ProcessGroup) {
				c := tp.NewComm(pg)
				x := autograd.NewVar(tp.ShardedOn(1, 1).Shard(full, c.Rank(), c.Size()), true)
				loss := tp.CrossEntropy(distributedtest.Context(t, time.Minute), c, x, tgt)
				autograd.Backward(loss)
				if err := c.Err(); err != nil {
					t.Fatal(err)
				}
				if d := math.Abs(float64(loss.Value.Item() - ref.Value.Item())); d > 1e-6 {
					t.Errorf("rank %d: loss %v, full %v", c.Rank(), loss.Value.Item(), ref.Value.Item())
				}
				want := tp.ShardedOn(1, 1).Shard(fv.Grad, c.Rank(), c.Size())
				if d := gpttest.MaxDiff(x.Grad, want); d > 1e-7 {
					t.Errorf("rank %d: gradient differs from the full one's shard by %g", c.Rank(), d)
				}
			})
		})
	}
}

// TestPlacementRoundTrip: Unshard inverts Shard, including q|k|v blocks.
func TestPlacementRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	full := tensor.New(12, 6)
	full.FillNormal(rng, 0, 1)
	for _, p := range []tp.Placement{tp.Replicated, tp.ShardedOn(0, 1), tp.ShardedOn(1, 1), tp.ShardedOn(0, 3), tp.ShardedOn(1, 3)} {
		for _, n := range []int{1, 2} {
			t.Run(fmt.Sprintf("%v/n=%d", p, n), func(t *testing.T) {
				parts := make([]*tensor.Tensor, n)
				for r := range n {
					parts[r] = p.Shard(full, r, n)
				}
				if d := gpttest.MaxDiff(p.Unshard(parts), full); d != 0 {
					t.Errorf("round trip differs by %g", d)
				}
			})
		}
	}
	// q|k|v: rank 1 of 2 holds rows 2-3 of each block of 4.
	s := tp.ShardedOn(0, 3).Shard(full, 1, 2)
	for i, row := range []int{2, 3, 6, 7, 10, 11} {
		if s.At(i, 0) != full.At(row, 0) {
			t.Errorf("q|k|v shard row %d is not full row %d", i, row)
		}
	}
}
