package collective

import "slices"

// The plan builder: build runs one algorithm's builder function for one
// rank and finishes the plan it emits (whether it runs in order or
// inline, which peers check its header, which steps fold); the builder
// type holds the emitting helpers the algorithm files share (send, recv,
// reduce, copy, segmenting and pipelining). The registry of algorithms
// and the choice among them are in registry.go.

func build(a algorithm, c Call, size, rank int, t Tuning) *Plan {
	segBytes := t.SegmentBytes
	if segBytes <= 0 {
		share := int64(c.Count) * int64(c.DType.Size()) / int64(size)
		segBytes = min(max(share/2, minAutoSegment), maxAutoSegment)
	}
	// A segmented plan whose segments fit InlineBytes runs inline, segment
	// by segment (see emitSegmented); its automatic segment is capped so.
	segmented := a.segmented && t.InlineBytes > 0
	if segmented && t.SegmentBytes <= 0 {
		segBytes = min(segBytes, maxInlineSegment, t.InlineBytes)
	}
	seg := max(int(segBytes/int64(c.DType.Size())), 1)
	segmented = segmented && int64(seg)*int64(c.DType.Size()) <= t.InlineBytes
	b := &builder{
		p:       &Plan{Algo: a.name, Call: c, Size: size, Rank: rank},
		n:       size,
		r:       rank,
		seg:     seg,
		depth:   t.Depth,
		inOrder: segmented,
	}
	a.build(b)
	b.p.InOrder = a.inOrder || segmented
	// Every message of every rank is at most Count elements (a segment,
	// for a segmented plan), so this is the same decision on all ranks.
	b.p.Inline = segmented || a.inOrder && t.InlineBytes >= 0 && int64(c.Count)*int64(c.DType.Size()) <= t.InlineBytes
	b.p.check, b.p.left = checkPeers(b.p)
	b.p.announce = announcePeers(b.p)
	return b.p
}

// checkPeers lists the group ranks whose op header a rank checks: those it
// receives from, plus its left ring neighbour for collectives (so that the
// checks of all ranks chain into one cycle), or the other side of a
// point-to-point op. It also returns the left neighbour (−1 if none).
func checkPeers(p *Plan) (peers []int, left int) {
	n, c := p.Size, p.Call
	chk := make([]bool, n)
	left = -1
	switch {
	case c.Kind == Recv:
		chk[c.Peer] = true
	case c.Kind == Send:
	case n > 1:
		left = mod(p.Rank-1, n)
		chk[left] = true
	}
	for _, s := range p.Steps {
		if s.Kind == StepRecv {
			chk[s.Peer] = true
		}
	}
	for g, ok := range chk {
		if ok {
			peers = append(peers, g)
		}
	}
	return peers, left
}

// announcePeers lists the group ranks a rank sends its op header to: the
// mirror image of checkPeers.
func announcePeers(p *Plan) []int {
	n, c := p.Size, p.Call
	ann := make([]bool, n)
	switch {
	case c.Kind == Send:
		ann[c.Peer] = true
	case c.Kind == Recv:
	case n > 1:
		ann[mod(p.Rank+1, n)] = true
	}
	for _, s := range p.Steps {
		if s.Kind == StepSend {
			ann[s.Peer] = true
		}
	}
	var peers []int
	for g, ok := range ann {
		if ok {
			peers = append(peers, g)
		}
	}
	return peers
}

// combineBytes bounds the first message of an inline plan that carries
// the op header in front: the executor stages such a message (one copy
// more on each side), which for a small one costs less than a message of
// its own would, and for a segment of a large plan more.
const combineBytes = 64 << 10

// carriesHeader reports whether plan p's first message carries its op
// header (es is the size of the call's dtype).
func carriesHeader(p *Plan, es int) bool {
	return len(p.Steps) > 0 && p.Steps[0].Kind == StepSend && int64(p.Steps[0].Src.Len)*int64(es) <= combineBytes
}

// foldable marks the receives whose message may be reduced where it
// arrives (transport.RecvFold), never landing in the receive's
// destination X: a receive followed by a reduce that takes X as one
// operand, whose other operand does not overlap X, and that writes X
// itself or memory apart from it; unless the reduce writes X, X must be
// scratch memory of which no later step reads an element before one
// writes it again.
// It returns nil when there is none.
func foldable(steps []Step) []bool {
	var folds []bool
	for i := 0; i+1 < len(steps); i++ {
		s, next := steps[i], steps[i+1]
		if s.Kind != StepRecv || next.Kind != StepReduce || s.Dst.Len == 0 {
			continue
		}
		x := s.Dst
		other := next.Src2
		switch x {
		case next.Src:
		case next.Src2:
			other = next.Src
		default:
			continue
		}
		if other.overlaps(x) || next.Dst != x && (next.Dst.overlaps(x) || !unreadAfter(steps[i+2:], x)) {
			continue
		}
		if folds == nil {
			folds = make([]bool, len(steps))
		}
		folds[i] = true
	}
	return folds
}

// unreadAfter reports whether no step reads an element of scratch region
// x before a step writes it.
func unreadAfter(steps []Step, x Region) bool {
	if x.Buf != Tmp {
		return false
	}
	undef := []Region{x} // the parts of x not written yet
	reads := func(r Region) bool {
		for _, u := range undef {
			if u.overlaps(r) {
				return true
			}
		}
		return false
	}
	for _, s := range steps {
		switch s.Kind {
		case StepSend, StepCopy:
			if reads(s.Src) {
				return false
			}
		case StepReduce:
			if reads(s.Src) || reads(s.Src2) {
				return false
			}
		case StepAvg:
			if reads(s.Dst) {
				return false
			}
		}
		if s.Kind == StepSend || s.Kind == StepAvg || s.Dst.Buf != Tmp {
			continue
		}
		var rest []Region
		for _, u := range undef {
			if !u.overlaps(s.Dst) {
				rest = append(rest, u)
				continue
			}
			if u.Off < s.Dst.Off {
				rest = append(rest, Region{Tmp, u.Off, s.Dst.Off - u.Off})
			}
			if u.end() > s.Dst.end() {
				rest = append(rest, Region{Tmp, s.Dst.end(), u.end() - s.Dst.end()})
			}
		}
		if undef = rest; len(undef) == 0 {
			return true
		}
	}
	return true
}

// combinedFrom lists the peers whose first message to this rank carries
// their op header: those whose (inline) plan starts by sending to it a
// message of at most combineBytes.
func combinedFrom(a algorithm, p *Plan, t Tuning) []int {
	peers, _ := checkPeers(p)
	var out []int
	for _, g := range peers {
		c := p.Call
		if c.Kind == Recv {
			c.Kind, c.Peer = Send, p.Rank
			a = algorithms[slices.IndexFunc(algorithms, func(x algorithm) bool { return x.kind == Send })]
		}
		q := build(a, c, p.Size, g, t)
		if carriesHeader(q, q.Call.DType.Size()) && q.Steps[0].Peer == p.Rank {
			out = append(out, g)
		}
	}
	return out
}

// builder accumulates one rank's steps. Helpers drop empty transfers and
// computations; both sides of a message compute the same length, so they
// drop it together.
type builder struct {
	p     *Plan
	n, r  int
	seg   int // elements per pipeline segment
	depth int // segments received ahead
	// inOrder: emit a segmented plan segment by segment, to run inline
	// (see emitSegmented).
	inOrder bool
}

func (b *builder) call() Call { return b.p.Call }

// exchangeAll appends one direct exchange, all message 0: a send to
// every other rank, rank r+1 first, then a receive from every other, rank
// r−1 first; send(to) and recv(from) give the regions.
func (b *builder) exchangeAll(send func(to int) Region, recv func(from int) Region) {
	n, r := b.n, b.r
	for k := 1; k < n; k++ {
		to := mod(r+k, n)
		b.send(to, 0, send(to))
	}
	for k := 1; k < n; k++ {
		from := mod(r-k, n)
		b.recv(from, 0, recv(from))
	}
}

// fromRoot returns this rank counted from the call's root (the root is
// 0), and real, which maps such a number back to a rank.
func (b *builder) fromRoot() (v int, real func(u int) int) {
	root, n := b.call().Root, b.n
	return mod(b.r-root, n), func(u int) int { return mod(u+root, n) }
}

func (b *builder) add(s Step) { b.p.Steps = append(b.p.Steps, s) }

func (b *builder) send(peer int, msg int, src Region) {
	if src.Len > 0 {
		b.add(Step{Kind: StepSend, Peer: peer, Msg: uint32(msg), Src: src})
	}
}

func (b *builder) recv(peer int, msg int, dst Region) {
	if dst.Len > 0 {
		b.add(Step{Kind: StepRecv, Peer: peer, Msg: uint32(msg), Dst: dst})
	}
}

func (b *builder) reduce(dst, a, c Region) {
	if dst.Len > 0 {
		b.add(Step{Kind: StepReduce, Dst: dst, Src: a, Src2: c})
	}
}

func (b *builder) copy(dst, src Region) {
	if dst.Len > 0 && dst != src {
		b.add(Step{Kind: StepCopy, Dst: dst, Src: src})
	}
}

// avg appends the division of Avg when the call's op is Avg.
func (b *builder) avg(dst Region) {
	if dst.Len > 0 && b.call().Op == Avg && b.n > 1 {
		b.add(Step{Kind: StepAvg, Dst: dst})
	}
}

// tmp reserves n more elements of scratch memory and returns them.
func (b *builder) tmp(n int) Region {
	r := Region{Tmp, b.p.TmpLen, n}
	b.p.TmpLen += n
	return r
}

// task is one unit of a software pipeline: a receive into dst, then the
// work that consumes it, which touches the region uses.
type task struct {
	recv func()
	dst  Region
	rest func()
	uses Region
	seg  int // the segment the task moves (emitSegmented's order)
}

// ringTask is segment k's task in a step of a segmented ring: receive
// message msg from rank left into dst, then rest, which works on uses.
func (b *builder) ringTask(left, msg, k int, dst, uses Region, rest func()) task {
	return task{seg: k, dst: dst, uses: uses, recv: func() { b.recv(left, msg, dst) }, rest: rest}
}

// ringFirst returns the first sends of a segmented ring for
// emitSegmented: segment k of src to rank to, as message k (step 0).
func (b *builder) ringFirst(to, segs int, src Region) []func() {
	first := make([]func(), segs)
	for k := range segs {
		first[k] = func() { b.send(to, k, segment(src, b.seg, k)) }
	}
	return first
}

// emitSegmented emits a segmented plan: first[k] sends segment k of the
// data a rank starts with, and each task receives a segment and works on
// it (forwarding it, mostly), tasks listed step by step. Run by the
// executor's goroutines (b.inOrder false), every first send goes out at
// once and the tasks are pipelined, receiving depth segments ahead. Run
// inline, in order, the plan goes segment by segment instead: segment k's
// first send, then its tasks of every step, before anything of segment
// k+1. A rank then sends one message and receives one in turn, so no link
// holds more than a segment or two not yet received, whatever the
// payload, and no transport needs to buffer more than that for the plan
// to complete in order (a step's task depends only on the step before it
// for the same segment).
func emitSegmented(b *builder, first []func(), tasks []task) {
	if !b.inOrder {
		for _, f := range first {
			f()
		}
		pipeline(tasks, b.depth)
		return
	}
	slices.SortStableFunc(tasks, func(x, y task) int { return x.seg - y.seg })
	i := 0
	for k := 0; k < len(first) || i < len(tasks); k++ {
		if k < len(first) {
			first[k]()
		}
		for ; i < len(tasks) && tasks[i].seg <= k; i++ {
			if tasks[i].recv != nil {
				tasks[i].recv()
			}
			if tasks[i].rest != nil {
				tasks[i].rest()
			}
		}
	}
}

// pipeline emits tasks so that the receives of the next ahead tasks are
// issued before the work of task i: the executor then receives ahead while
// it reduces or forwards. Receives stay in task order, and one is issued
// early only if its destination is not touched by the tasks it overtakes
// (receives into a ring of ahead+1 scratch slots always qualify: task
// i+ahead reuses the slot of task i−1, whose work comes earlier).
func pipeline(tasks []task, ahead int) {
	next := 0 // first task whose receive is not issued yet
	emit := func() {
		if tasks[next].recv != nil {
			tasks[next].recv()
		}
		next++
	}
	// clear reports whether task j's receive may overtake the work of
	// tasks i…j−1.
	clear := func(j, i int) bool {
		for m := i; m < j; m++ {
			if tasks[m].uses.overlaps(tasks[j].dst) || tasks[m].dst.overlaps(tasks[j].dst) {
				return false
			}
		}
		return true
	}
	for i := range tasks {
		for next <= i {
			emit()
		}
		for next <= i+ahead && next < len(tasks) && clear(next, i) {
			emit()
		}
		if tasks[i].rest != nil {
			tasks[i].rest()
		}
	}
}

// split returns the offset and length of part i when n elements are cut
// into parts nearly equal parts (the first n%parts one longer).
func split(n, parts, i int) (off, length int) {
	base, rem := n/parts, n%parts
	return i*base + min(i, rem), base + b2i(i < rem)
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

func mod(a, n int) int { return ((a % n) + n) % n }

func ceilDiv(a, b int) int {
	if a <= 0 {
		return 0
	}
	return (a + b - 1) / b
}

// segment returns segment k (of length seg) of r; past the end it is empty.
func segment(r Region, seg, k int) Region {
	off := k * seg
	if off >= r.Len {
		return Region{r.Buf, r.end(), 0}
	}
	return r.sub(off, min(seg, r.Len-off))
}

// all returns the whole of buffer buf, n elements.
func all(buf Buf, n int) Region { return Region{buf, 0, n} }

// chunk returns part i of n elements cut into parts parts.
func chunk(buf Buf, n, parts, i int) Region {
	off, l := split(n, parts, i)
	return Region{buf, off, l}
}

// floorPow2 returns the largest power of two <= n (n >= 1).
func floorPow2(n int) int {
	p := 1
	for p*2 <= n {
		p *= 2
	}
	return p
}
