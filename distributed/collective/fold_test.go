package collective

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/cohortml/cohort/distributed/transport"
)

// folder folds every message received through RecvFold from a private
// copy, in pieces of random whole-unit sizes, after filling the receive's
// scratch with 0xff bytes (NaN, or −1): a plan that read the scratch of a
// folded receive would compute garbage.
type folder struct {
	transport.Transport
	mu    sync.Mutex
	rng   *rand.Rand
	folds *atomic.Int64
}

func (f *folder) RecvFold(ctx context.Context, from int, tag transport.Tag, scratch []byte, unit int, fold func(off int, q []byte)) error {
	msg := make([]byte, len(scratch))
	if err := f.Recv(ctx, from, tag, msg); err != nil {
		return err
	}
	for i := range scratch {
		scratch[i] = 0xff
	}
	f.folds.Add(1)
	for off := 0; off < len(msg); {
		f.mu.Lock()
		k := unit * (1 + f.rng.IntN(64))
		f.mu.Unlock()
		k = min(k, len(msg)-off)
		fold(off, msg[off:off+k])
		off += k
	}
	return nil
}

// TestExecutorFolds: with a transport that folds, every reducing
// algorithm gives the reference result, and the executor folds exactly
// the receives foldable marks (the ring, halving-doubling and recursive
// doubling all-reduces have some): through the transport, or from the
// message that carried a peer's op header.
func TestExecutorFolds(t *testing.T) {
	for _, kind := range []Kind{AllReduce, ReduceScatter, Reduce} {
		for _, algo := range Algorithms(kind) {
			t.Run(kind.String()+"/"+algo, func(t *testing.T) {
				t.Parallel()
				var total int64
				for _, size := range []int{2, 3, 4, 8} {
					for _, count := range []int{1, 7, 1000} {
						for _, dt := range []DType{Float32, BFloat16, Int64} {
							for _, op := range []Op{Sum, Avg, Max} {
								for _, tun := range []Tuning{{}, {SegmentBytes: 64}} {
									c := Call{Kind: kind, DType: dt, Op: op, Count: count, Root: size - 1}
									var want int64
									for r := range size {
										p, err := NewPlan(c, size, r, algo, tun)
										if err != nil {
											t.Fatal(err)
										}
										want += transportFolds(p)
									}
									var folds atomic.Int64
									name := fmt.Sprintf("world=%d/n=%d/%v/%v/seg=%d", size, count, dt, op, tun.SegmentBytes)
									ok := t.Run(name, func(t *testing.T) {
										checkCallVia(t, c, size, algo, tun, func(r int, tr transport.Transport) transport.Transport {
											return &folder{Transport: tr, rng: rand.New(rand.NewPCG(uint64(r), uint64(count))), folds: &folds}
										})
										if got := folds.Load(); got != want {
											t.Errorf("%d receives folded, want %d", got, want)
										}
									})
									if !ok {
										return
									}
									total += want
								}
							}
						}
					}
				}
				if kind == AllReduce && algo != "direct" && total == 0 {
					t.Errorf("no receive of %s folded", algo)
				}
			})
		}
	}
}

// transportFolds counts the receives of p folded through the transport:
// the folded ones, except a first receive from a peer whose first message
// carries its header (the executor folds that message itself).
func transportFolds(p *Plan) int64 {
	var n int64
	seen := map[int]bool{}
	for i, s := range p.Steps {
		if s.Kind != StepRecv {
			continue
		}
		first := !seen[s.Peer]
		seen[s.Peer] = true
		if p.folds != nil && p.folds[i] && !(first && slices.Contains(p.CombinedFrom, s.Peer)) {
			n++
		}
	}
	return n
}

// TestFoldable: a receive folds into the reduce after it only when the
// received region is one of its operands, the other does not overlap it,
// and the region is not needed afterwards.
func TestFoldable(t *testing.T) {
	x := Region{Tmp, 0, 8}
	out := Region{Out, 0, 8}
	recv := Step{Kind: StepRecv, Peer: 1, Dst: x}
	reduce := func(dst, a, b Region) Step { return Step{Kind: StepReduce, Dst: dst, Src: a, Src2: b} }
	for _, tc := range []struct {
		name  string
		steps []Step
		want  bool
	}{
		{"first-operand", []Step{recv, reduce(out, x, out)}, true},
		{"second-operand", []Step{recv, reduce(out, out, x)}, true},
		{"read-later", []Step{recv, reduce(out, x, out), {Kind: StepSend, Peer: 1, Src: x}}, false},
		{"part-read-later", []Step{recv, reduce(out, x, out), {Kind: StepCopy, Dst: Region{Out, 8, 2}, Src: Region{Tmp, 6, 2}}}, false},
		{"rewritten-then-read", []Step{recv, reduce(out, x, out), {Kind: StepRecv, Peer: 1, Dst: Region{Tmp, 0, 16}}, {Kind: StepSend, Peer: 1, Src: x}}, true},
		{"partly-rewritten-then-read", []Step{recv, reduce(out, x, out), {Kind: StepRecv, Peer: 1, Dst: Region{Tmp, 0, 4}}, {Kind: StepSend, Peer: 1, Src: x}}, false},
		{"rewritten-part-read", []Step{recv, reduce(out, x, out), {Kind: StepRecv, Peer: 1, Dst: Region{Tmp, 2, 4}}, {Kind: StepSend, Peer: 1, Src: Region{Tmp, 3, 3}}}, true},
		{"rewritten-in-parts", []Step{recv, reduce(out, x, out), {Kind: StepRecv, Peer: 1, Dst: Region{Tmp, 4, 4}}, reduce(Region{Tmp, 0, 4}, out, out), {Kind: StepSend, Peer: 1, Src: x}}, true},
		{"unwritten-part-read", []Step{recv, reduce(out, x, out), {Kind: StepRecv, Peer: 1, Dst: Region{Tmp, 2, 4}}, {Kind: StepSend, Peer: 1, Src: Region{Tmp, 5, 2}}}, false},
		{"reduce-writes-it", []Step{recv, reduce(x, x, out), {Kind: StepSend, Peer: 1, Src: x}}, true},
		{"into-output", []Step{{Kind: StepRecv, Peer: 1, Dst: out}, reduce(Region{Out, 8, 8}, out, Region{Out, 8, 8})}, false},
		{"operands-overlap", []Step{recv, reduce(out, x, Region{Tmp, 4, 8})}, false},
		{"writes-into-it", []Step{recv, reduce(Region{Tmp, 4, 8}, x, out)}, false},
		{"not-a-reduce", []Step{recv, {Kind: StepCopy, Dst: out, Src: x}}, false},
		{"empty", []Step{{Kind: StepRecv, Peer: 1, Dst: Region{Tmp, 0, 0}}, reduce(Region{Out, 0, 0}, Region{Tmp, 0, 0}, Region{Out, 0, 0})}, false},
		{"avg-reads-it", []Step{recv, reduce(out, x, out), {Kind: StepAvg, Dst: Region{Tmp, 2, 2}}}, false},
	} {
		got := foldable(tc.steps)
		if (got != nil && got[0]) != tc.want {
			t.Errorf("%s: folds %v, want first %v", tc.name, got, tc.want)
		}
		for i, f := range got {
			if f && tc.steps[i].Kind != StepRecv {
				t.Errorf("%s: step %d (%v) marked", tc.name, i, tc.steps[i])
			}
		}
	}
}
