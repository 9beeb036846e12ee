package native

import (
	"context"
	"fmt"

	"github.com/cohortml/cohort/distributed"
	"github.com/cohortml/cohort/distributed/collective"
)

// The ProcessGroup methods check their arguments, then queue the op. An
// invalid call still takes its turn: when it comes, it fails and breaks the
// group (its peers are waiting for it), so the error surfaces on every rank
// instead of a hang.

func (g *group) call(kind collective.Kind, dt distributed.DType) collective.Call {
	return collective.Call{Kind: kind, DType: dt}
}

func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

func (g *group) AllReduce(ctx context.Context, buf distributed.Buffer, op distributed.ReduceOp) distributed.Work {
	c := g.call(collective.AllReduce, buf.DType)
	c.Op, c.Count = op, buf.Len()
	return g.submit(ctx, c, nil, buf.Bytes(), firstErr(distributed.CheckDTypes("allreduce", buf), distributed.CheckReduceOp("allreduce", op)))
}

func (g *group) Broadcast(ctx context.Context, buf distributed.Buffer, root int) distributed.Work {
	c := g.call(collective.Broadcast, buf.DType)
	c.Count, c.Root = buf.Len(), root
	return g.submit(ctx, c, nil, buf.Bytes(), firstErr(distributed.CheckDTypes("broadcast", buf), distributed.CheckRoot("broadcast", root, len(g.ranks))))
}

func (g *group) Reduce(ctx context.Context, buf distributed.Buffer, root int, op distributed.ReduceOp) distributed.Work {
	c := g.call(collective.Reduce, buf.DType)
	c.Op, c.Count, c.Root = op, buf.Len(), root
	return g.submit(ctx, c, nil, buf.Bytes(),
		firstErr(distributed.CheckDTypes("reduce", buf), distributed.CheckReduceOp("reduce", op), distributed.CheckRoot("reduce", root, len(g.ranks))))
}

func (g *group) AllGather(ctx context.Context, out, in distributed.Buffer) distributed.Work {
	c := g.call(collective.AllGather, in.DType)
	c.Count = in.Len()
	err := distributed.CheckDTypes("allgather", out, in)
	if err == nil {
		err = distributed.CheckParts("allgather", len(g.ranks), out, "output", in, "input")
	}
	if err == nil {
		_, err = distributed.AllGatherInPlace(out, in, g.rank)
	}
	return g.submit(ctx, c, in.Bytes(), out.Bytes(), err)
}

func (g *group) ReduceScatter(ctx context.Context, out, in distributed.Buffer, op distributed.ReduceOp) distributed.Work {
	c := g.call(collective.ReduceScatter, out.DType)
	c.Op, c.Count = op, out.Len()
	err := firstErr(distributed.CheckDTypes("reducescatter", out, in), distributed.CheckReduceOp("reducescatter", op))
	if err == nil {
		err = distributed.CheckParts("reducescatter", len(g.ranks), in, "input", out, "output")
	}
	return g.submit(ctx, c, in.Bytes(), out.Bytes(), err)
}

func (g *group) AllToAll(ctx context.Context, out, in distributed.Buffer) distributed.Work {
	n := len(g.ranks)
	c := g.call(collective.AllToAll, in.DType)
	c.Count = in.Len() / n
	err := distributed.CheckDTypes("alltoall", out, in)
	if err == nil {
		err = distributed.CheckSplit("alltoall", out, in, n)
	}
	return g.submit(ctx, c, in.Bytes(), out.Bytes(), err)
}

func (g *group) Gather(ctx context.Context, out, in distributed.Buffer, root int) distributed.Work {
	c := g.call(collective.Gather, in.DType)
	c.Count, c.Root = in.Len(), root
	whole, err := distributed.CheckRooted("gather", root, g.rank, len(g.ranks), out, in, true, distributed.CheckDTypes)
	return g.submit(ctx, c, in.Bytes(), whole.Bytes(), err)
}

func (g *group) Scatter(ctx context.Context, out, in distributed.Buffer, root int) distributed.Work {
	c := g.call(collective.Scatter, out.DType)
	c.Count, c.Root = out.Len(), root
	whole, err := distributed.CheckRooted("scatter", root, g.rank, len(g.ranks), out, in, false, distributed.CheckDTypes)
	return g.submit(ctx, c, whole.Bytes(), out.Bytes(), err)
}

func (g *group) checkPeer(op string, peer, tag int) error {
	switch {
	case peer < 0 || peer >= len(g.ranks):
		return fmt.Errorf("distributed: %s: rank %d out of range [0, %d)", op, peer, len(g.ranks))
	case peer == g.rank:
		return fmt.Errorf("distributed: %s: rank %d to itself", op, peer)
	case tag < 0 || tag > 1<<31-1:
		return fmt.Errorf("distributed: %s: tag %d out of range [0, 2^31)", op, tag)
	}
	return nil
}

// Send and Recv are ops of the group like the collectives: they run in
// issue order, so a Recv holds back the ops issued after it until its
// message arrives. They are numbered per (peer, tag) stream, apart from
// the collectives, so ranks that take no part are unaffected.
func (g *group) Send(ctx context.Context, buf distributed.Buffer, to int, tag int) distributed.Work {
	c := g.call(collective.Send, buf.DType)
	c.Count, c.Peer, c.Tag = buf.Len(), to, tag
	return g.submit(ctx, c, nil, buf.Bytes(), firstErr(distributed.CheckDTypes("send", buf), g.checkPeer("send", to, tag)))
}

func (g *group) Recv(ctx context.Context, buf distributed.Buffer, from int, tag int) distributed.Work {
	c := g.call(collective.Recv, buf.DType)
	c.Count, c.Peer, c.Tag = buf.Len(), from, tag
	return g.submit(ctx, c, nil, buf.Bytes(), firstErr(distributed.CheckDTypes("recv", buf), g.checkPeer("recv", from, tag)))
}

func (g *group) Barrier(ctx context.Context) distributed.Work {
	return g.submit(ctx, collective.Call{Kind: collective.Barrier}, nil, nil, nil)
}
