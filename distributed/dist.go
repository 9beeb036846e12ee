package distributed

import (
	"context"
	"errors"

	"github.com/cohortml/cohort/distributed/collective"
)

// ErrAborted is wrapped by every error from a group that a failed or
// timed-out op has broken; the message names the op, its seq and the peer.
var ErrAborted = errors.New("distributed: process group aborted")

// ReduceOp combines values element-wise. It is the collectives' own
// type (collective.Op): Avg is Sum divided by the number of ranks
// (truncating for Int64).
type ReduceOp = collective.Op

const (
	Sum  = collective.Sum
	Avg  = collective.Avg
	Max  = collective.Max
	Min  = collective.Min
	Prod = collective.Prod
)

// Work is the handle of an asynchronous op. Ops on one group complete in
// the order they were issued.
type Work interface {
	// Wait blocks until the op is done and returns its error.
	Wait() error
	// Done is closed when the op is done.
	Done() <-chan struct{}
}

// ProcessGroup is a set of ranks that run collectives together. Every rank
// must issue the same collectives in the same order; a mismatch is detected
// and reported (desync detection) rather than hanging. Buffers passed to an
// op must not be touched until its Work is done.
type ProcessGroup interface {
	Rank() int
	Size() int
	// AllReduce reduces buf element-wise across ranks, in place.
	AllReduce(ctx context.Context, buf Buffer, op ReduceOp) Work
	// Broadcast copies root's buf into every rank's buf.
	Broadcast(ctx context.Context, buf Buffer, root int) Work
	// Reduce leaves the reduction in root's buf.
	Reduce(ctx context.Context, buf Buffer, root int, op ReduceOp) Work
	// AllGather concatenates every rank's in (equal lengths) into out,
	// rank order; len(out) == Size()·len(in). in may be this rank's own
	// chunk of out (out[Rank()·len(in):][:len(in)]): the gather then runs
	// in place, without copying it. Any other overlap is an error.
	AllGather(ctx context.Context, out, in Buffer) Work
	// ReduceScatter reduces in (Size()·len(out) elements) across ranks and
	// leaves chunk Rank() of the result in out.
	ReduceScatter(ctx context.Context, out, in Buffer, op ReduceOp) Work
	// AllToAll sends chunk j of in to rank j and receives rank j's chunk
	// for this rank into chunk j of out (equal chunks).
	AllToAll(ctx context.Context, out, in Buffer) Work
	// Gather concatenates every rank's in into root's out (ignored elsewhere).
	Gather(ctx context.Context, out, in Buffer, root int) Work
	// Scatter sends chunk j of root's in to rank j's out.
	Scatter(ctx context.Context, out, in Buffer, root int) Work
	// Send and Recv move buf point-to-point; tag separates streams between
	// the same pair of ranks.
	Send(ctx context.Context, buf Buffer, to int, tag int) Work
	Recv(ctx context.Context, buf Buffer, from int, tag int) Work
	// Barrier returns once every rank has entered it.
	Barrier(ctx context.Context) Work
	// Close releases the group; pending ops fail with ErrAborted.
	Close() error
}
