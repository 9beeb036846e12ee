package collective

import (
	"fmt"
	"testing"
)

// The simulator executes every rank's plan symbolically. An element is the
// index it came from plus how many times each rank's contribution has been
// folded into it, so a plan that drops, duplicates or mixes up elements
// fails, whatever the numbers. Messages are matched by (from, to, msg) with
// unlimited buffering, which is the transport contract; the simulator also
// requires each pair's messages to be received in the order they were sent,
// so transports with bounded queues cannot deadlock on a plan.

const simMaxRanks = 16

type sym struct {
	set bool
	idx int32
	cnt [simMaxRanks]uint8
}

func origin(rank, idx int) sym {
	s := sym{set: true, idx: int32(idx)}
	s.cnt[rank] = 1
	return s
}

func (s sym) String() string {
	if !s.set {
		return "unset"
	}
	return fmt.Sprintf("{idx %d cnt %v}", s.idx, s.cnt)
}

type simMsg struct {
	data  []sym
	heard uint64 // ranks whose start happened before this send
}

type simKey struct {
	from, to int
	msg      uint32
}

type simRank struct {
	plan          *Plan
	in, out, tmp  []sym
	pc            int
	heard         uint64
	inOrig        []sym
	sentOrder     map[int][]uint32 // by destination
	receivedOrder map[int][]uint32 // by source
	sentKeys      map[simKey]bool
	pending       []simRecv
}

func newSimRank(p *Plan, r int) *simRank {
	return &simRank{plan: p, heard: 1 << r, sentOrder: map[int][]uint32{}, receivedOrder: map[int][]uint32{}, sentKeys: map[simKey]bool{}}
}

func (sr *simRank) buf(b Buf) []sym {
	switch b {
	case In:
		return sr.in
	case Out:
		return sr.out
	}
	return sr.tmp
}

func (sr *simRank) region(r Region) ([]sym, error) {
	b := sr.buf(r.Buf)
	if r.Off < 0 || r.end() > len(b) {
		return nil, fmt.Errorf("region %v outside %v of %d", r, r.Buf, len(b))
	}
	return b[r.Off:r.end()], nil
}

func (sr *simRank) read(r Region) ([]sym, error) {
	s, err := sr.region(r)
	if err != nil {
		return nil, err
	}
	for i, e := range s {
		if !e.set {
			return nil, fmt.Errorf("reads unset element %d of %v", i, r)
		}
	}
	return s, nil
}

// simulate runs the plans of all ranks for call c and checks the outcome,
// with asynchronous receives and, for plans that claim InOrder, again with
// blocking ones.
func simulate(c Call, size int, algo string, tun Tuning) error {
	inOrder, err := simulateMode(c, size, algo, tun, false)
	if err != nil || !inOrder {
		return err
	}
	if _, err := simulateMode(c, size, algo, tun, true); err != nil {
		return fmt.Errorf("in order: %w", err)
	}
	return nil
}

func simulateMode(c Call, size int, algo string, tun Tuning, blocking bool) (inOrder bool, err error) {
	if size > simMaxRanks {
		return false, fmt.Errorf("simulator supports up to %d ranks", simMaxRanks)
	}
	ranks := make([]*simRank, size)
	inOrder = true
	for r := range size {
		if c.Kind == Send || c.Kind == Recv {
			return false, fmt.Errorf("use simulatePair for point-to-point")
		}
		p, err := NewPlan(c, size, r, algo, tun)
		if err != nil {
			return false, err
		}
		inOrder = inOrder && p.InOrder
		sr := newSimRank(p, r)
		sr.in = make([]sym, c.InLen(size))
		for i := range sr.in {
			sr.in[i] = origin(r, i)
		}
		sr.inOrig = append([]sym(nil), sr.in...)
		sr.out = make([]sym, c.OutLen(size))
		if c.Kind == AllReduce || c.Kind == Broadcast || c.Kind == Reduce {
			for i := range sr.out {
				sr.out[i] = origin(r, i)
			}
		}
		sr.tmp = make([]sym, p.TmpLen)
		if c.Kind == Barrier || c.Kind == Agree {
			for i := range sr.tmp {
				sr.tmp[i] = origin(r, i) // the token's value does not matter
			}
		}
		ranks[r] = sr
	}
	if err := runSim(ranks, blocking); err != nil {
		return false, err
	}
	return inOrder, checkSim(c, size, ranks)
}

// simRecv is a posted receive: the executor issues receives without
// waiting and a later step that touches the region waits for it; receives
// from one peer complete in the order they were posted.
type simRecv struct {
	key simKey
	dst Region
}

// complete finishes pending receive i and every earlier one from the same
// peer; false if a message has not been sent yet.
// operands reads a local step's sources (in order) and then finds its
// destination, failing at the first bad region.
func (sr *simRank) operands(dst Region, srcs ...Region) ([]sym, [][]sym, error) {
	in := make([][]sym, len(srcs))
	for i, r := range srcs {
		v, err := sr.read(r)
		if err != nil {
			return nil, nil, err
		}
		in[i] = v
	}
	d, err := sr.region(dst)
	return d, in, err
}

func (sr *simRank) complete(box map[simKey]simMsg, i int) (bool, error) {
	peer := sr.pending[i].key.from
	for j := 0; j <= i; j++ { // all there, or none taken
		if p := sr.pending[j]; p.key.from == peer {
			if _, ok := box[p.key]; !ok {
				return false, nil
			}
		}
	}
	for j := 0; j <= i; j++ {
		p := sr.pending[j]
		if p.key.from != peer {
			continue
		}
		m := box[p.key]
		delete(box, p.key)
		dst, err := sr.region(p.dst)
		if err != nil {
			return false, err
		}
		if len(m.data) != len(dst) {
			return false, fmt.Errorf("message %d of %d elements into region %v", p.key.msg, len(m.data), p.dst)
		}
		copy(dst, m.data)
		sr.heard |= m.heard
	}
	kept := sr.pending[:0]
	for j, p := range sr.pending {
		if j > i || p.key.from != peer {
			kept = append(kept, p)
		}
	}
	sr.pending = kept
	return true, nil
}

// settle completes the pending receives that overlap any of regs.
func (sr *simRank) settle(box map[simKey]simMsg, regs ...Region) (bool, error) {
	for i := len(sr.pending) - 1; i >= 0; i-- {
		if i >= len(sr.pending) {
			continue
		}
		for _, r := range regs {
			if sr.pending[i].dst.overlaps(r) {
				ok, err := sr.complete(box, i)
				if !ok || err != nil {
					return ok, err
				}
				break
			}
		}
	}
	return true, nil
}

// runSim executes the plans. With inOrder, every receive blocks until its
// message is there, as when the executor runs a plan inline.
func runSim(ranks []*simRank, inOrder bool) error {
	box := map[simKey]simMsg{}
	for {
		progress, done := false, true
		for r, sr := range ranks {
			for sr.pc <= len(sr.plan.Steps) {
				if sr.pc == len(sr.plan.Steps) {
					// The op ends when every receive is complete.
					for len(sr.pending) > 0 {
						ok, err := sr.complete(box, len(sr.pending)-1)
						if err != nil {
							return fmt.Errorf("rank %d at end: %w", r, err)
						}
						if !ok {
							goto blocked
						}
					}
					sr.pc++
					progress = true
					break
				}
				s := sr.plan.Steps[sr.pc]
				fail := func(err error) error { return fmt.Errorf("rank %d step %d (%v): %w", r, sr.pc, s, err) }
				if ok, err := sr.settle(box, s.Dst, s.Src, s.Src2); err != nil {
					return fail(err)
				} else if !ok {
					goto blocked
				}
				switch s.Kind {
				case StepSend:
					src, err := sr.read(s.Src)
					if err != nil {
						return fail(err)
					}
					k := simKey{r, s.Peer, s.Msg}
					if _, dup := box[k]; dup || sr.sentKeys[k] {
						return fail(fmt.Errorf("message number reused"))
					}
					sr.sentKeys[k] = true
					box[k] = simMsg{data: append([]sym(nil), src...), heard: sr.heard}
					sr.sentOrder[s.Peer] = append(sr.sentOrder[s.Peer], s.Msg)
				case StepRecv:
					if _, err := sr.region(s.Dst); err != nil {
						return fail(err)
					}
					k := simKey{s.Peer, r, s.Msg}
					if _, ok := box[k]; inOrder && !ok {
						goto blocked
					}
					sr.pending = append(sr.pending, simRecv{k, s.Dst})
					sr.receivedOrder[s.Peer] = append(sr.receivedOrder[s.Peer], s.Msg)
					if inOrder {
						if _, err := sr.complete(box, len(sr.pending)-1); err != nil {
							return fail(err)
						}
					}
				case StepReduce:
					dst, in, err := sr.operands(s.Dst, s.Src, s.Src2)
					if err != nil {
						return fail(err)
					}
					a, b := in[0], in[1]
					if len(a) != len(dst) || len(b) != len(dst) {
						return fail(fmt.Errorf("length mismatch %d = %d ⊕ %d", len(dst), len(a), len(b)))
					}
					res := make([]sym, len(dst))
					for i := range dst {
						if a[i].idx != b[i].idx {
							return fail(fmt.Errorf("element %d folds index %d with %d", i, a[i].idx, b[i].idx))
						}
						res[i] = a[i]
						for j := range res[i].cnt {
							res[i].cnt[j] += b[i].cnt[j]
						}
					}
					copy(dst, res)
				case StepCopy:
					dst, in, err := sr.operands(s.Dst, s.Src)
					if err != nil {
						return fail(err)
					}
					src := in[0]
					if len(src) != len(dst) {
						return fail(fmt.Errorf("copy length mismatch"))
					}
					copy(dst, append([]sym(nil), src...))
				case StepAvg:
					if _, err := sr.read(s.Dst); err != nil {
						return fail(err)
					}
				}
				sr.pc++
				progress = true
			}
			continue
		blocked:
			done = false
		}
		if done {
			break
		}
		if !progress {
			var stuck []string
			for r, sr := range ranks {
				if sr.pc < len(sr.plan.Steps) {
					stuck = append(stuck, fmt.Sprintf("rank %d at step %d (%v)", r, sr.pc, sr.plan.Steps[sr.pc]))
				} else if sr.pc == len(sr.plan.Steps) {
					stuck = append(stuck, fmt.Sprintf("rank %d at the end waiting for %v", r, sr.pending[0].key))
				}
			}
			return fmt.Errorf("deadlock: %v", stuck)
		}
	}
	for k := range box {
		return fmt.Errorf("message %d from rank %d to rank %d never received", k.msg, k.from, k.to)
	}
	for r, sr := range ranks {
		for to, sent := range sr.sentOrder {
			got := ranks[to].receivedOrder[r]
			if fmt.Sprint(sent) != fmt.Sprint(got) {
				return fmt.Errorf("rank %d sends to rank %d in order %v but it receives in order %v", r, to, sent, got)
			}
		}
	}
	return nil
}

func checkSim(c Call, size int, ranks []*simRank) error {
	all := func() (s [simMaxRanks]uint8) {
		for i := range size {
			s[i] = 1
		}
		return s
	}()
	for r, sr := range ranks {
		for i := range sr.in {
			if sr.in[i] != sr.inOrig[i] {
				return fmt.Errorf("rank %d: input element %d changed to %v", r, i, sr.in[i])
			}
		}
		want := func(i int) (sym, bool) {
			n := c.Count
			switch c.Kind {
			case AllReduce:
				return sym{set: true, idx: int32(i), cnt: all}, true
			case Broadcast:
				return origin(c.Root, i), true
			case Reduce:
				if r == c.Root {
					return sym{set: true, idx: int32(i), cnt: all}, true
				}
				return origin(r, i), true
			case AllGather:
				return origin(i/n, i%n), true
			case ReduceScatter:
				return sym{set: true, idx: int32(r*n + i), cnt: all}, true
			case AllToAll:
				return origin(i/n, r*n+i%n), true
			case Gather:
				if r != c.Root {
					return sym{}, false
				}
				return origin(i/n, i%n), true
			case Scatter:
				return origin(c.Root, r*n+i), true
			}
			return sym{}, false
		}
		for i := range sr.out {
			w, ok := want(i)
			if ok && sr.out[i] != w {
				return fmt.Errorf("rank %d: out[%d] = %v, want %v", r, i, sr.out[i], w)
			}
		}
		if (c.Kind == Barrier || c.Kind == Agree) && sr.heard != 1<<size-1 {
			return fmt.Errorf("rank %d leaves the barrier having heard only from %b", r, sr.heard)
		}
	}
	return nil
}

// simulatePair runs a Send on rank from and the matching Recv on rank to.
func simulatePair(count, size, from, to int) error {
	ps, err := NewPlan(Call{Kind: Send, Count: count, Peer: to}, size, from, "", Tuning{})
	if err != nil {
		return err
	}
	pr, err := NewPlan(Call{Kind: Recv, Count: count, Peer: from}, size, to, "", Tuning{})
	if err != nil {
		return err
	}
	ranks := make([]*simRank, size)
	for r := range size {
		p := &Plan{Size: size, Rank: r}
		switch r {
		case from:
			p = ps
		case to:
			p = pr
		}
		sr := newSimRank(p, r)
		sr.out = make([]sym, count)
		if r == from {
			for i := range sr.out {
				sr.out[i] = origin(r, i)
			}
		}
		ranks[r] = sr
	}
	if err := runSim(ranks, true); err != nil {
		return err
	}
	for i, e := range ranks[to].out {
		if e != origin(from, i) {
			return fmt.Errorf("recv out[%d] = %v", i, e)
		}
	}
	return nil
}

var simKinds = []Kind{AllReduce, Broadcast, Reduce, AllGather, ReduceScatter, AllToAll, Gather, Scatter, Barrier, Agree}

// TestPlansSimulate checks every algorithm of every kind on worlds 1–16
// with counts around the chunk boundaries, roots at both ends, and small
// segments so that the pipelines really cut.
func TestPlansSimulate(t *testing.T) {
	tunings := map[string]Tuning{
		"default": {},
		"seg3":    {SegmentBytes: 12, Depth: 1},
		"seg5d3":  {SegmentBytes: 20, Depth: 3},
	}
	for _, kind := range simKinds {
		for _, algo := range Algorithms(kind) {
			t.Run(kind.String()+"/"+algo, func(t *testing.T) {
				for _, size := range []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 16} {
					for _, count := range []int{0, 1, 2, size - 1, size, size + 1, 3*size + 2, 37} {
						roots := []int{0}
						if kind.rooted() {
							roots = []int{0, size - 1, size / 2}
						}
						for _, root := range roots {
							for tname, tun := range tunings {
								c := Call{Kind: kind, DType: Float32, Op: Sum, Count: count, Root: root}
								if kind == Barrier {
									c.Count = 0
								}
								if err := simulate(c, size, algo, tun); err != nil {
									t.Fatalf("world=%d/n=%d/root=%d/%s: %v", size, count, root, tname, err)
								}
							}
						}
					}
				}
			})
		}
	}
}

func TestPlansSimulatePointToPoint(t *testing.T) {
	for _, tc := range []struct{ size, from, to, count int }{
		{2, 0, 1, 0}, {2, 1, 0, 5}, {5, 3, 1, 1000}, {8, 7, 0, 1},
	} {
		t.Run(fmt.Sprintf("world=%d/%d->%d/n=%d", tc.size, tc.from, tc.to, tc.count), func(t *testing.T) {
			if err := simulatePair(tc.count, tc.size, tc.from, tc.to); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestSimulatorCatchesBrokenPlans makes sure the simulator is not vacuous:
// plans with a dropped, duplicated or misdirected step must fail.
func TestSimulatorCatchesBrokenPlans(t *testing.T) {
	c := Call{Kind: AllReduce, DType: Float32, Count: 10}
	mutations := map[string]func(p *Plan){
		"drop reduce": func(p *Plan) {
			for i, s := range p.Steps {
				if s.Kind == StepReduce {
					p.Steps = append(p.Steps[:i:i], p.Steps[i+1:]...)
					return
				}
			}
		},
		"double reduce": func(p *Plan) {
			for i, s := range p.Steps {
				if s.Kind == StepReduce {
					p.Steps = append(p.Steps[:i+1:i+1], p.Steps[i:]...)
					return
				}
			}
		},
		"wrong peer": func(p *Plan) {
			for i, s := range p.Steps {
				if s.Kind == StepSend {
					p.Steps[i].Peer = mod(s.Peer+1, p.Size)
					return
				}
			}
		},
		"shifted region": func(p *Plan) {
			for i, s := range p.Steps {
				if s.Kind == StepRecv && s.Dst.Buf == Out && s.Dst.Off > 0 {
					p.Steps[i].Dst.Off--
					return
				}
			}
		},
	}
	for name, mutate := range mutations {
		t.Run(name, func(t *testing.T) {
			size := 3
			ranks := make([]*simRank, size)
			for r := range size {
				p, err := NewPlan(c, size, r, "ring", Tuning{})
				if err != nil {
					t.Fatal(err)
				}
				if r == 1 {
					mutate(p)
				}
				sr := newSimRank(p, r)
				sr.out = make([]sym, c.Count)
				for i := range sr.out {
					sr.out[i] = origin(r, i)
				}
				sr.tmp = make([]sym, p.TmpLen)
				ranks[r] = sr
			}
			err := runSim(ranks, false)
			if err == nil {
				err = checkSim(c, size, ranks)
			}
			if err == nil {
				t.Fatal("broken plan passed the simulator")
			}
			t.Logf("caught: %v", err)
		})
	}
}
