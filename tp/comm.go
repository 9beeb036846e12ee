package tp

import (
	"context"
	"fmt"
	"sync"

	"github.com/cohortml/cohort/autograd"
	"github.com/cohortml/cohort/distributed"
	"github.com/cohortml/cohort/tensor"
)

// Comm is a tensor-parallel group as the layers use it: the process group
// and the first error any of its collectives met (sticky, like
// bufio.Writer's). It is safe for concurrent use, but the collectives of
// one group must be issued in the same order on every rank, as always.
type Comm struct {
	pg distributed.ProcessGroup

	mu  sync.Mutex
	err error
}

// NewComm returns a Comm over pg (for example a Mesh's "tp" group). pg
// must not be nil.
func NewComm(pg distributed.ProcessGroup) *Comm {
	if pg == nil {
		panic("tp: NewComm: nil process group")
	}
	return &Comm{pg: pg}
}

// Group returns the process group.
func (c *Comm) Group() distributed.ProcessGroup { return c.pg }

// Rank returns this rank's index in the group: the index of the shard it
// holds.
func (c *Comm) Rank() int { return c.pg.Rank() }

// Size returns the number of ranks the tensors are split across.
func (c *Comm) Size() int { return c.pg.Size() }

// Err returns the first error of a collective issued through c, or nil.
// After an error every later collective is skipped and the values computed
// since are meaningless.
func (c *Comm) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

func (c *Comm) fail(err error) {
	c.mu.Lock()
	if c.err == nil {
		c.err = err
	}
	c.mu.Unlock()
}

// run waits for one collective unless c has already failed.
func (c *Comm) run(op string, start func() distributed.Work) {
	if c.Err() != nil {
		return
	}
	if err := start().Wait(); err != nil {
		c.fail(fmt.Errorf("tp: %s on rank %d of %d: %w", op, c.Rank(), c.Size(), err))
	}
}

// allReduce sums the contiguous tensor t across the group in place.
func (c *Comm) allReduce(ctx context.Context, op string, t *tensor.Tensor) {
	if c.Size() == 1 {
		return
	}
	c.run(op, func() distributed.Work { return c.pg.AllReduce(ctx, distributed.FromTensor(t), distributed.Sum) })
}

// gatherLast concatenates every rank's x [..., k] along the last dimension
// in rank order: [..., Size()·k], a new contiguous tensor.
func (c *Comm) gatherLast(ctx context.Context, op string, x *tensor.Tensor) *tensor.Tensor {
	n := c.Size()
	if n == 1 {
		return x.Clone()
	}
	shape := x.Shape()
	k := shape[len(shape)-1]
	rows := x.Len() / max(k, 1)
	out := tensor.Empty(n, rows, k) // the all-gather writes it whole
	in := x.Contiguous()
	c.run(op, func() distributed.Work {
		return c.pg.AllGather(ctx, distributed.FromTensor(out), distributed.FromTensor(in))
	})
	outShape := append(append([]int(nil), shape[:len(shape)-1]...), n*k)
	y := tensor.Empty(rows, n, k)
	y.CopyFrom(out.Permute(1, 0, 2))
	tensor.Recycle(out)
	return y.Reshape(outShape...)
}

// chunkLast returns this rank's chunk of the last dimension of x, a new
// contiguous tensor. It panics when the dimension does not split evenly.
func (c *Comm) chunkLast(op string, x *tensor.Tensor) *tensor.Tensor {
	n := c.Size()
	if x.Dims() == 0 || x.Dim(-1)%n != 0 {
		panic(fmt.Sprintf("tp: %s: last dimension of shape %v does not split across %d ranks", op, x.Shape(), n))
	}
	k := x.Dim(-1) / n
	return clone(x.Narrow(-1, c.Rank()*k, k))
}

// Copy is Megatron's f: the identity forward, and an all-reduce (sum) of
// the gradient backward. It goes in front of a layer whose parameters are
// split and whose input is replicated, so that every rank's input gradient
// becomes the sum of the shards' contributions. The all-reduce runs in
// place on the incoming gradient when that is private to the op (see
// autograd.RecordOwned), on a copy otherwise.
func Copy(ctx context.Context, c *Comm, x *autograd.Var) *autograd.Var {
	if c.Size() == 1 {
		return x
	}
	return autograd.RecordOwned("tp.Copy", x.Value, false, []*autograd.Var{x}, func(g *tensor.Tensor, private bool) []autograd.InputGrad {
		if !private || !g.IsContiguous() {
			g = clone(g)
		}
		c.allReduce(ctx, "Copy backward all-reduce", g)
		return []autograd.InputGrad{{T: g, Owned: true}}
	})
}

// Reduce is Megatron's g, the conjugate of Copy: an all-reduce (sum)
// forward and the identity backward. It joins the partial outputs of a
// layer whose input features are split. Its output is storage of its own
// (autograd.Transient applies).
func Reduce(ctx context.Context, c *Comm, x *autograd.Var) *autograd.Var {
	if c.Size() == 1 {
		return x
	}
	y := clone(x.Value)
	c.allReduce(ctx, "Reduce all-reduce", y)
	return autograd.RecordOwned("tp.Reduce", y, true, []*autograd.Var{x}, passGrad)
}

// reduceOwned is Reduce for an x whose value is the fresh output of an op
// that nothing but this Reduce reads (and that is not marked Transient):
// the all-reduce runs in place on that storage, which becomes the output's
// own.
func reduceOwned(ctx context.Context, c *Comm, x *autograd.Var) *autograd.Var {
	if c.Size() == 1 || !x.Value.IsContiguous() {
		return Reduce(ctx, c, x)
	}
	y := x.Value
	c.allReduce(ctx, "Reduce all-reduce", y)
	return autograd.RecordOwned("tp.Reduce", y, true, []*autograd.Var{x}, passGrad)
}

// passGrad is the backward of an identity: the gradient goes on as it
// came, with its ownership.
func passGrad(g *tensor.Tensor, private bool) []autograd.InputGrad {
	return []autograd.InputGrad{{T: g, Owned: private}}
}

// clone returns a contiguous copy of t in storage from tensor.EmptyOn.
func clone(t *tensor.Tensor) *tensor.Tensor {
	y := tensor.EmptyOn(t.Device(), t.Shape()...)
	y.CopyFrom(t)
	return y
}

// Gather concatenates every rank's x [..., k] along the last dimension, in
// rank order, into a replicated [..., Size()·k]; backward keeps this rank's
// chunk of the gradient. Every rank's x must have the same shape.
func Gather(ctx context.Context, c *Comm, x *autograd.Var) *autograd.Var {
	if c.Size() == 1 {
		return x
	}
	y := c.gatherLast(ctx, "Gather all-gather", x.Value)
	return autograd.RecordOwned("tp.Gather", y, true, []*autograd.Var{x}, func(g *tensor.Tensor, _ bool) []autograd.InputGrad {
		return []autograd.InputGrad{{T: c.chunkLast("Gather backward", g), Owned: true}}
	})
}

// Split keeps this rank's chunk of the last dimension of the replicated x
// (chunk Rank() of Size() equal chunks); backward all-gathers the chunks'
// gradients. It panics when the last dimension does not split evenly.
func Split(ctx context.Context, c *Comm, x *autograd.Var) *autograd.Var {
	if c.Size() == 1 {
		return x
	}
	y := c.chunkLast("Split", x.Value)
	return autograd.RecordOwned("tp.Split", y, true, []*autograd.Var{x}, func(g *tensor.Tensor, _ bool) []autograd.InputGrad {
		return []autograd.InputGrad{{T: c.gatherLast(ctx, "Split backward all-gather", g), Owned: true}}
	})
}
