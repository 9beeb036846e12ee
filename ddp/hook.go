package ddp

import (
	"context"
	"fmt"

	"github.com/cohortml/cohort/distributed"
	"github.com/cohortml/cohort/tensor"
)

// Bucket is one bucket's gradients as a CommHook sees them.
type Bucket struct {
	// Index is the bucket's position in the plan; hooks may key state on it.
	Index int
	// Grad is the bucket's flat gradient: this rank's contribution when
	// Start is called, the group average once Finish returns. The hook owns
	// it from Start until Finish returns.
	Grad []float32
	// Tensor is the bucket's flat gradient when the model is on a device
	// (Grad is then nil): a contiguous view of device memory, owned by
	// the hook as Grad is. Only AllReduceHook runs on device buckets.
	Tensor *tensor.Tensor
	// Params lays out the parameters inside Grad, in order.
	Params []BucketParam
	// Divisor is the number of ranks the average is over: the world size,
	// or the ranks still training under Join.
	Divisor int
	// Step counts synchronised steps from 0; it is equal on every rank.
	Step int64
	// Shadow is set on a rank that has joined: Grad holds zeros and the
	// rank must contribute nothing (no error feedback) to the result.
	Shadow bool
}

// BucketParam places one parameter inside Bucket.Grad.
type BucketParam struct {
	Name   string
	Shape  []int
	Offset int // first element in Bucket.Grad
	Len    int // number of elements
}

// A CommHook reduces buckets across the process group. Every rank calls
// Start for the same buckets in the same order, and Finish in bucket
// order, so a hook may issue several collectives per bucket as long as it
// issues them in an order that depends only on data every rank shares. A
// hook is used by one Model, from one goroutine.
type CommHook interface {
	// Start begins reducing b and returns at once; the collectives it
	// issues run in the background.
	Start(ctx context.Context, pg distributed.ProcessGroup, b *Bucket) Reduction
}

// Reduction is a bucket reduction in flight.
type Reduction interface {
	// Done is closed when the communication Start issued has completed.
	Done() <-chan struct{}
	// Finish waits for the communication, issues any later stage, and
	// leaves the average in the bucket's Grad. It is called exactly once,
	// in bucket order.
	Finish() error
}

// AllReduceHook averages each bucket with an exact float32 all-reduce: an
// Avg reduction when the divisor is the group size (the group divides
// each chunk once, in the background), otherwise a sum divided by
// Bucket.Divisor. It is the default hook.
type AllReduceHook struct{}

// Start implements CommHook.
func (AllReduceHook) Start(ctx context.Context, pg distributed.ProcessGroup, b *Bucket) Reduction {
	if b.Tensor != nil {
		return startAllReduceTensor(ctx, pg, b.Index, b.Tensor, b.Divisor)
	}
	return startAllReduce(ctx, pg, b.Index, b.Grad, b.Divisor)
}

// startAllReduce sums grad across the group and divides it by divisor.
func startAllReduce(ctx context.Context, pg distributed.ProcessGroup, index int, grad []float32, divisor int) Reduction {
	if pg.Size() == 1 && divisor == 1 {
		return newDoneReduction()
	}
	op, post := distributed.Sum, divisor
	if divisor == pg.Size() {
		op, post = distributed.Avg, 1
	}
	w := pg.AllReduce(ctx, distributed.F32(grad), op)
	return &workReduction{work: w, finish: func() error {
		if err := w.Wait(); err != nil {
			return fmt.Errorf("ddp: bucket %d: all-reduce of %d gradients: %w", index, len(grad), err)
		}
		scale(grad, post)
		return nil
	}}
}

// workReduction is a single collective followed by local work.
type workReduction struct {
	work   distributed.Work
	finish func() error
}

func (r *workReduction) Done() <-chan struct{} { return distributed.Completion(r.work) }
func (r *workReduction) Finish() error         { return r.finish() }

// doneReduction is a reduction with nothing to do (a group of one).
type doneReduction struct{ done chan struct{} }

func newDoneReduction() doneReduction {
	c := make(chan struct{})
	close(c)
	return doneReduction{c}
}

func (r doneReduction) Done() <-chan struct{} { return r.done }
func (doneReduction) Finish() error           { return nil }

// scale divides every element of g by d. Division by a power of two is a
// multiplication by its exact reciprocal, which is faster and gives the
// same bits.
func scale(g []float32, d int) {
	switch {
	case d == 1:
	case d&(d-1) == 0:
		inv := 1 / float32(d)
		for i := range g {
			g[i] *= inv
		}
	default:
		f := float32(d)
		for i := range g {
			g[i] /= f
		}
	}
}

var (
	_ CommHook  = AllReduceHook{}
	_ CommHook  = (*CompressHook)(nil)
	_ CommHook  = (*PowerSGD)(nil)
	_ Reduction = (*workReduction)(nil)
	_ Reduction = (*powerReduction)(nil)
)
