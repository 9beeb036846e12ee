package ddp

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/cohortml/cohort/distributed"
	"github.com/cohortml/cohort/distributed/distributedtest"
)

// fakeHub is a minimal in-memory process group for the reducer's unit
// tests: the n-th collective of every rank meets the n-th of the others;
// the last rank to arrive computes the result (float32 sums in rank
// order, divided for Avg; fp16/bf16 sums widened to float32 and rounded
// once) and releases
// all. A rank whose n-th op differs fails the op on every rank. failAt
// makes the given op (by sequence number) fail everywhere.
type fakeHub struct {
	world  int
	mu     sync.Mutex
	ops    map[int64]*fakeOp
	failAt int64
	log    []string // kinds of completed ops, in order (rank 0's view)
}

type fakeOp struct {
	kind    string
	avg     bool
	root    int
	ins     []distributed.Buffer
	outs    []distributed.Buffer
	arrived int
	done    chan struct{}
	err     error
}

type fakePG struct {
	h    *fakeHub
	rank int
	seq  int64
}

type fakeWork struct {
	op *fakeOp
}

func (w fakeWork) Wait() error           { <-w.op.done; return w.op.err }
func (w fakeWork) Done() <-chan struct{} { return w.op.done }

func newFakeHub(world int) *fakeHub {
	return &fakeHub{world: world, ops: map[int64]*fakeOp{}, failAt: -1}
}

func (g *fakePG) Rank() int { return g.rank }
func (g *fakePG) Size() int { return g.h.world }

func (g *fakePG) submit(kind string, root int, in, out distributed.Buffer) distributed.Work {
	h := g.h
	seq := g.seq
	g.seq++
	h.mu.Lock()
	op := h.ops[seq]
	if op == nil {
		op = &fakeOp{kind: kind, root: root, ins: make([]distributed.Buffer, h.world), outs: make([]distributed.Buffer, h.world), done: make(chan struct{})}
		h.ops[seq] = op
	}
	if op.kind != kind || op.root != root {
		op.err = fmt.Errorf("fake: op %d: rank %d issued %s(root %d), another rank %s(root %d)", seq, g.rank, kind, root, op.kind, op.root)
	}
	op.ins[g.rank], op.outs[g.rank] = in, out
	op.arrived++
	last := op.arrived == h.world
	if last {
		delete(h.ops, seq)
		if seq == h.failAt {
			op.err = fmt.Errorf("fake: op %d failed: %w", seq, distributed.ErrAborted)
		}
		h.log = append(h.log, kind)
	}
	h.mu.Unlock()
	if last {
		if op.err == nil {
			op.err = op.run()
		}
		close(op.done)
	}
	return fakeWork{op}
}

func (op *fakeOp) run() error {
	n := op.ins[0].Len()
	for r, b := range op.ins {
		if b.DType != op.ins[0].DType || b.Len() != n {
			return fmt.Errorf("fake: %s: rank %d buffer %v×%d, rank 0 %v×%d", op.kind, r, b.DType, b.Len(), op.ins[0].DType, n)
		}
	}
	switch op.kind {
	case "allreduce", "allreduce-avg":
		op.avg = op.kind == "allreduce-avg"
		switch op.ins[0].DType {
		case distributed.Float32:
			sum := make([]float32, n)
			for _, b := range op.ins {
				for i, v := range b.Float32s() {
					sum[i] += v
				}
			}
			if op.avg {
				for i := range sum {
					sum[i] /= float32(len(op.ins))
				}
			}
			for _, b := range op.ins {
				copy(b.Float32s(), sum)
			}
		case distributed.Int64:
			sum := make([]int64, n)
			for _, b := range op.ins {
				for i, v := range b.Int64s() {
					sum[i] += v
				}
			}
			for _, b := range op.ins {
				copy(b.Int64s(), sum)
			}
		case distributed.Float16, distributed.BFloat16:
			enc, dec := distributed.FP16FromFloat32, distributed.FP16ToFloat32
			if op.ins[0].DType == distributed.BFloat16 {
				enc, dec = distributed.BF16FromFloat32, distributed.BF16ToFloat32
			}
			sum := make([]float32, n)
			for _, b := range op.ins {
				for i, v := range b.Uint16s() {
					sum[i] += dec(v)
				}
			}
			for _, b := range op.ins {
				for i := range sum {
					b.Uint16s()[i] = enc(sum[i])
				}
			}
		default:
			return fmt.Errorf("fake: allreduce of %v", op.ins[0].DType)
		}
	case "broadcast":
		src := op.ins[op.root]
		for _, b := range op.ins {
			switch src.DType {
			case distributed.Float32:
				copy(b.Float32s(), src.Float32s())
			case distributed.Int64:
				copy(b.Int64s(), src.Int64s())
			default:
				return fmt.Errorf("fake: broadcast of %v", src.DType)
			}
		}
	case "allgather":
		for _, out := range op.outs {
			if out.Len() != n*len(op.ins) {
				return fmt.Errorf("fake: allgather: out has %d elements, want %d", out.Len(), n*len(op.ins))
			}
			for r, in := range op.ins {
				switch in.DType {
				case distributed.Int64:
					copy(out.Int64s()[r*n:], in.Int64s())
				case distributed.Float32:
					copy(out.Float32s()[r*n:], in.Float32s())
				default:
					copy(out.Uint16s()[r*n:], in.Uint16s())
				}
			}
		}
	}
	return nil
}

func (g *fakePG) AllReduce(ctx context.Context, buf distributed.Buffer, op distributed.ReduceOp) distributed.Work {
	switch {
	case op == distributed.Sum:
		return g.submit("allreduce", 0, buf, buf)
	case op == distributed.Avg && buf.DType == distributed.Float32:
		return g.submit("allreduce-avg", 0, buf, buf)
	}
	return g.unsupported(fmt.Sprintf("AllReduce op %d on %v", op, buf.DType))
}
func (g *fakePG) Broadcast(ctx context.Context, buf distributed.Buffer, root int) distributed.Work {
	return g.submit("broadcast", root, buf, buf)
}
func (g *fakePG) AllGather(ctx context.Context, out, in distributed.Buffer) distributed.Work {
	return g.submit("allgather", 0, in, out)
}
func (g *fakePG) unsupported(name string) distributed.Work {
	op := &fakeOp{done: make(chan struct{}), err: errors.New("fake: " + name + " not implemented")}
	close(op.done)
	return fakeWork{op}
}
func (g *fakePG) Reduce(context.Context, distributed.Buffer, int, distributed.ReduceOp) distributed.Work {
	return g.unsupported("Reduce")
}
func (g *fakePG) ReduceScatter(context.Context, distributed.Buffer, distributed.Buffer, distributed.ReduceOp) distributed.Work {
	return g.unsupported("ReduceScatter")
}
func (g *fakePG) AllToAll(context.Context, distributed.Buffer, distributed.Buffer) distributed.Work {
	return g.unsupported("AllToAll")
}
func (g *fakePG) Gather(context.Context, distributed.Buffer, distributed.Buffer, int) distributed.Work {
	return g.unsupported("Gather")
}
func (g *fakePG) Scatter(context.Context, distributed.Buffer, distributed.Buffer, int) distributed.Work {
	return g.unsupported("Scatter")
}
func (g *fakePG) Send(context.Context, distributed.Buffer, int, int) distributed.Work {
	return g.unsupported("Send")
}
func (g *fakePG) Recv(context.Context, distributed.Buffer, int, int) distributed.Work {
	return g.unsupported("Recv")
}
func (g *fakePG) Barrier(context.Context) distributed.Work { return g.unsupported("Barrier") }
func (g *fakePG) Close() error                             { return nil }

var _ distributed.ProcessGroup = (*fakePG)(nil)

// runFake runs fn on world ranks over a fake group, one goroutine each,
// and returns every rank's error. A run longer than a minute fails the
// test instead of hanging it.
func runFake(t *testing.T, world int, fn func(pg distributed.ProcessGroup) error) []error {
	t.Helper()
	h := newFakeHub(world)
	return runHub(t, h, fn)
}

func runHub(t *testing.T, h *fakeHub, fn func(pg distributed.ProcessGroup) error) []error {
	t.Helper()
	errs := make([]error, h.world)
	var wg sync.WaitGroup
	for r := 0; r < h.world; r++ {
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			defer func() {
				if p := recover(); p != nil {
					errs[r] = fmt.Errorf("rank %d panicked: %v", r, p)
				}
			}()
			errs[r] = fn(&fakePG{h: h, rank: r})
		}(r)
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatalf("ranks still running after a minute (hang)")
	}
	return errs
}

// runDist runs fn on world ranks over the real process group on the
// in-process transport (disttest) and returns every rank's error.
func runDist(t *testing.T, world int, fn func(pg distributed.ProcessGroup) error) []error {
	t.Helper()
	return runDistTimeout(t, world, 0, fn)
}

// runDistTimeout is runDist with a per-op timeout (0: disttest's).
func runDistTimeout(t *testing.T, world int, timeout time.Duration, fn func(pg distributed.ProcessGroup) error) []error {
	t.Helper()
	errs := make([]error, world)
	distributedtest.RunWith(t, world, distributed.GroupOptions{Timeout: timeout}, func(t *testing.T, pg distributed.ProcessGroup) {
		errs[pg.Rank()] = fn(pg)
	})
	return errs
}
