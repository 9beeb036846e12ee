package collective

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"

	"cohort/dist/transport"
)

// Executor runs plans over a transport for one group of ranks. It owns the
// scratch memory plans use and is not safe for concurrent use: a group runs
// one op at a time, and ops of different groups use different executors.
type Executor struct {
	t     transport.Transport
	group uint32
	ranks []int // ranks[g] is the transport rank of group rank g
	rank  int   // this process's group rank
	tmp   []uint64
}

// NewExecutor returns an executor for the group whose members are the
// transport ranks listed in ranks (group rank g is ranks[g]); the
// transport's own rank must be among them. group is the Tag.Group of every
// message, so that groups sharing a transport never mix.
func NewExecutor(t transport.Transport, group uint32, ranks []int) (*Executor, error) {
	me := -1
	seen := make(map[int]bool, len(ranks))
	for g, r := range ranks {
		if r < 0 || r >= t.Size() {
			return nil, fmt.Errorf("collective: group rank %d is transport rank %d, out of range [0, %d)", g, r, t.Size())
		}
		if seen[r] {
			return nil, fmt.Errorf("collective: transport rank %d listed twice in group", r)
		}
		seen[r] = true
		if r == t.Rank() {
			me = g
		}
	}
	if me < 0 {
		return nil, fmt.Errorf("collective: transport rank %d is not a member of group %v", t.Rank(), ranks)
	}
	return &Executor{t: t, group: group, ranks: append([]int(nil), ranks...), rank: me}, nil
}

// Rank returns this process's rank in the group; Size the group size.
func (e *Executor) Rank() int { return e.rank }
func (e *Executor) Size() int { return len(e.ranks) }

// StepError is a failure of one step of a plan; Peer is a transport
// (global) rank, or −1 for local failures.
type StepError struct {
	Algo string
	Call Call
	Seq  uint64
	Step int // index in the plan; −1 for the op header
	What string
	Peer int
	Err  error
}

func (e *StepError) Error() string {
	step := "header"
	if e.Step >= 0 {
		step = fmt.Sprintf("step %d", e.Step)
	}
	return fmt.Sprintf("collective: %s %v seq %d %s: %s: %v", e.Algo, e.Call.Kind, e.Seq, step, e.What, e.Err)
}

func (e *StepError) Unwrap() error { return e.Err }

// Run executes plan p (built for this executor's rank and group size) as
// op seq of the group, reading in and writing out (raw bytes of the call's
// dtype; for in-place kinds only out is used). Every rank of the group must
// run the matching plan with the same seq. Before any data moves, each rank
// sends its call's fingerprint to the peers it will send to and to its
// right neighbour, and checks those of the peers it will receive from and
// its left neighbour; a mismatch fails with a *DesyncError.
//
// Sends and receives run on one goroutine per peer and direction, in plan
// order; a step waits only for the earlier steps whose memory it touches,
// so receiving overlaps with reducing and forwarding. Run returns once all
// of them are done: on success every buffer is settled; on failure (the
// first error, wrapped in a *StepError, or ctx's) nothing is left running.
// The contents of out are then unspecified.
func (e *Executor) Run(ctx context.Context, seq uint64, p *Plan, in, out []byte) error {
	if p.Size != len(e.ranks) || p.Rank != e.rank {
		return fmt.Errorf("collective: plan for rank %d of %d run by rank %d of %d", p.Rank, p.Size, e.rank, len(e.ranks))
	}
	es := p.Call.DType.Size()
	if p.Call.Kind == Barrier || p.Call.Kind == Agree {
		es = 4
	}
	if need := p.TmpLen * es; len(e.tmp)*8 < need {
		e.tmp = make([]uint64, (need+7)/8)
	}
	r := &run{
		e:    e,
		p:    p,
		seq:  seq,
		es:   es,
		bufs: [3][]byte{Out: out, In: in, Tmp: u64Bytes(e.tmp)},
		wake: make(chan struct{}, 1),
	}
	if err := r.checkBounds(); err != nil {
		return err
	}
	return r.exec(ctx)
}

// u64Bytes views scratch words as bytes (8-byte aligned for every dtype).
func u64Bytes(s []uint64) []byte {
	if len(s) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), 8*len(s))
}

// run is the state of one Run call.
type run struct {
	e    *Executor
	p    *Plan
	seq  uint64
	es   int
	bufs [3][]byte

	ctx    context.Context
	cancel context.CancelFunc
	wake   chan struct{}
	wg     sync.WaitGroup
	mu     sync.Mutex
	err    error

	sends, recvs []*link // by group rank
	pending      []pendingIO
}

// link is the queue of transfers to or from one peer, worked through in
// order by one goroutine.
type link struct {
	peer   int // group rank
	send   bool
	jobs   chan job
	issued int64
	done   atomic.Int64
	header [headerLen]byte
	got    atomic.Bool // header received and checked
}

type job struct {
	step int // plan index, −1 for the header
	msg  uint32
	p    []byte
}

// pendingIO is an issued transfer the main loop has not yet seen finish.
type pendingIO struct {
	reg   Region
	write bool
	l     *link
	idx   int64 // finished once l.done >= idx
}

func (r *run) checkBounds() error {
	lens := [3]int{len(r.bufs[Out]), len(r.bufs[In]), r.p.TmpLen * r.es}
	check := func(i int, reg Region) error {
		if reg.Len == 0 {
			return nil
		}
		if int(reg.Buf) >= len(lens) || reg.Off < 0 || reg.Len < 0 || reg.end()*r.es > lens[reg.Buf] {
			return fmt.Errorf("collective: %s %v step %d: region %v outside buffer of %d bytes",
				r.p.Algo, r.p.Call.Kind, i, reg, lens[min(int(reg.Buf), 2)])
		}
		return nil
	}
	for i, s := range r.p.Steps {
		for _, reg := range [...]Region{s.Dst, s.Src, s.Src2} {
			if err := check(i, reg); err != nil {
				return err
			}
		}
		if (s.Kind == StepSend || s.Kind == StepRecv) && (s.Peer < 0 || s.Peer >= len(r.e.ranks) || s.Peer == r.e.rank) {
			return fmt.Errorf("collective: %s %v step %d: bad peer %d", r.p.Algo, r.p.Call.Kind, i, s.Peer)
		}
	}
	return nil
}

func (r *run) bytes(reg Region) []byte {
	return r.bufs[reg.Buf][reg.Off*r.es : reg.end()*r.es]
}

// fail records the first error and stops the op.
func (r *run) fail(err error) {
	r.mu.Lock()
	if r.err == nil {
		r.err = err
	}
	r.mu.Unlock()
	r.cancel()
}

func (r *run) firstErr() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

func (r *run) exec(parent context.Context) error {
	r.ctx, r.cancel = context.WithCancel(parent)
	defer r.cancel()
	n := len(r.e.ranks)
	r.sends, r.recvs = make([]*link, n), make([]*link, n)

	// Who announces to whom: data peers plus the ring neighbours, so that
	// the checks of all ranks chain into one cycle.
	c := r.p.Call
	counts := make([]int, 2*n)
	for _, s := range r.p.Steps {
		switch s.Kind {
		case StepSend:
			counts[s.Peer]++
		case StepRecv:
			counts[n+s.Peer]++
		}
	}
	announce := make([]bool, n)
	check := make([]bool, n)
	switch {
	case c.Kind == Send:
		announce[c.Peer] = true
	case c.Kind == Recv:
		check[c.Peer] = true
	case n > 1:
		announce[mod(r.e.rank+1, n)] = true
		check[mod(r.e.rank-1, n)] = true
	}
	for g := range n {
		if announce[g] || counts[g] > 0 {
			r.sends[g] = r.startLink(g, true, counts[g]+1)
		}
		if check[g] || counts[n+g] > 0 {
			r.recvs[g] = r.startLink(g, false, counts[n+g]+1)
		}
	}
	h := header{group: r.e.group, rank: uint32(r.e.rank), seq: r.seq, call: c}
	for _, l := range r.sends {
		if l != nil {
			h.encode(l.header[:])
			r.issue(l, job{step: -1, p: l.header[:]})
		}
	}
	for _, l := range r.recvs {
		if l != nil {
			r.issue(l, job{step: -1, p: l.header[:]})
		}
	}

	failed := r.steps()
	for _, l := range r.sends {
		if l != nil {
			close(l.jobs)
		}
	}
	for _, l := range r.recvs {
		if l != nil {
			close(l.jobs)
		}
	}
	r.wg.Wait()
	if err := r.firstErr(); err != nil {
		return err
	}
	if failed >= 0 {
		return r.stalled(parent, failed)
	}
	return nil
}

// stalled explains an op stopped by ctx: which peers never started it, or
// else which step it was waiting for.
func (r *run) stalled(parent context.Context, step int) error {
	err := parent.Err()
	if err == nil {
		err = context.Canceled
	}
	var missing []string
	peer := -1
	for _, l := range r.recvs {
		if l != nil && !l.got.Load() {
			missing = append(missing, fmt.Sprint(r.e.ranks[l.peer]))
			if peer < 0 {
				peer = r.e.ranks[l.peer]
			}
		}
	}
	what := "waiting"
	if len(missing) > 0 {
		what = fmt.Sprintf("rank %s has not started this op", strings.Join(missing, ", "))
		step = -1
	} else if step >= 0 && step < len(r.p.Steps) {
		s := r.p.Steps[step]
		if s.Kind == StepSend || s.Kind == StepRecv {
			peer = r.e.ranks[s.Peer]
		}
		what = "waiting on " + r.describe(s)
	}
	return &StepError{Algo: r.p.Algo, Call: r.p.Call, Seq: r.seq, Step: step, What: what, Peer: peer, Err: err}
}

func (r *run) describe(s Step) string {
	switch s.Kind {
	case StepSend:
		return fmt.Sprintf("send to rank %d", r.e.ranks[s.Peer])
	case StepRecv:
		return fmt.Sprintf("recv from rank %d", r.e.ranks[s.Peer])
	}
	return s.Kind.String()
}

func (r *run) startLink(peer int, send bool, jobs int) *link {
	l := &link{peer: peer, send: send, jobs: make(chan job, jobs)}
	r.wg.Add(1)
	go r.work(l)
	return l
}

// issue queues a job on its link and returns the link's job count.
func (r *run) issue(l *link, j job) int64 {
	l.jobs <- j
	l.issued++
	return l.issued
}

// work is a link's goroutine: it performs the link's jobs in order until
// the queue is closed, skipping them once the op has failed.
func (r *run) work(l *link) {
	defer r.wg.Done()
	t, tr := r.e.t, r.e.ranks[l.peer]
	for j := range l.jobs {
		if r.ctx.Err() != nil {
			continue
		}
		tag := transport.Tag{Group: r.e.group, Seq: r.seq, Step: j.msg + 1}
		if j.step < 0 {
			tag.Step = 0
		}
		var err error
		if l.send {
			err = t.Send(r.ctx, tr, tag, j.p)
		} else {
			err = t.Recv(r.ctx, tr, tag, j.p)
			if err == nil && j.step < 0 {
				err = r.checkHeader(l)
			}
		}
		if err != nil {
			if r.ctx.Err() != nil && !isPeerErr(err) {
				continue // stopped by ctx: reported by stalled
			}
			var de *DesyncError
			if errors.As(err, &de) {
				r.fail(err)
				continue
			}
			what := fmt.Sprintf("send to rank %d", tr)
			if !l.send {
				what = fmt.Sprintf("recv from rank %d", tr)
			}
			r.fail(&StepError{Algo: r.p.Algo, Call: r.p.Call, Seq: r.seq, Step: j.step, What: what, Peer: tr, Err: err})
			continue
		}
		l.done.Add(1)
		select {
		case r.wake <- struct{}{}:
		default:
		}
	}
}

func isPeerErr(err error) bool {
	var pe *transport.PeerError
	return errors.As(err, &pe)
}

func (r *run) checkHeader(l *link) error {
	h, err := decodeHeader(l.header[:])
	if err == nil && (h.group != r.e.group || h.seq != r.seq || int(h.rank) != l.peer) {
		err = fmt.Errorf("collective: op header for group %d seq %d rank %d, want group %d seq %d rank %d",
			h.group, h.seq, h.rank, r.e.group, r.seq, l.peer)
	}
	if err != nil {
		return err
	}
	theirs := h.call
	if theirs.Kind == Send {
		theirs.Peer = r.e.ranks[r.e.rank]
	}
	mine := r.p.Call
	if !matches(mine, theirs) {
		if mine.Kind == Send || mine.Kind == Recv {
			mine.Peer = r.e.ranks[mine.Peer]
		}
		return &DesyncError{Group: r.e.group, Seq: r.seq,
			Rank: r.e.ranks[r.e.rank], Call: mine, Peer: r.e.ranks[l.peer], PeerCall: theirs}
	}
	l.got.Store(true)
	return nil
}

// wait blocks until the pending transfer is done; false if the op failed.
func (r *run) wait(p *pendingIO) bool {
	for p.l.done.Load() < p.idx {
		select {
		case <-r.wake:
		case <-r.ctx.Done():
			return false
		}
	}
	return true
}

// settle waits for every pending transfer that conflicts with a step
// reading reads and writing write, and forgets finished ones.
func (r *run) settle(reads []Region, write Region) bool {
	keep := r.pending[:0]
	for i := range r.pending {
		p := &r.pending[i]
		if p.l.done.Load() >= p.idx {
			continue
		}
		conflict := p.reg.overlaps(write)
		if p.write && !conflict {
			for _, rd := range reads {
				if p.reg.overlaps(rd) {
					conflict = true
					break
				}
			}
		}
		if conflict {
			if !r.wait(p) {
				r.pending = keep
				return false
			}
			continue
		}
		keep = append(keep, *p)
	}
	r.pending = keep
	return true
}

// steps walks the plan, issuing transfers and computing in place. It
// returns the index of the step it stopped at when the op failed, or −1.
func (r *run) steps() int {
	c := r.p.Call
	var reads [2]Region
	for i, s := range r.p.Steps {
		if r.ctx.Err() != nil {
			return i
		}
		switch s.Kind {
		case StepSend:
			reads[0] = s.Src
			if !r.settle(reads[:1], Region{}) {
				return i
			}
			l := r.sends[s.Peer]
			idx := r.issue(l, job{step: i, msg: s.Msg, p: r.bytes(s.Src)})
			r.pending = append(r.pending, pendingIO{reg: s.Src, l: l, idx: idx})
		case StepRecv:
			if !r.settle(nil, s.Dst) {
				return i
			}
			l := r.recvs[s.Peer]
			idx := r.issue(l, job{step: i, msg: s.Msg, p: r.bytes(s.Dst)})
			r.pending = append(r.pending, pendingIO{reg: s.Dst, write: true, l: l, idx: idx})
		case StepReduce:
			reads[0], reads[1] = s.Src, s.Src2
			if !r.settle(reads[:2], s.Dst) {
				return i
			}
			reduceBytes(c.DType, c.Op, r.bytes(s.Dst), r.bytes(s.Src), r.bytes(s.Src2))
		case StepCopy:
			reads[0] = s.Src
			if !r.settle(reads[:1], s.Dst) {
				return i
			}
			copy(r.bytes(s.Dst), r.bytes(s.Src))
		case StepAvg:
			if !r.settle(nil, s.Dst) {
				return i
			}
			scaleBytes(c.DType, r.bytes(s.Dst), r.p.Size)
		}
	}
	// Wait for everything still in flight, in no particular order.
	for i := range r.pending {
		if !r.wait(&r.pending[i]) {
			return len(r.p.Steps)
		}
	}
	r.pending = r.pending[:0]
	for _, ls := range [2][]*link{r.sends, r.recvs} {
		for _, l := range ls {
			if l == nil {
				continue
			}
			p := pendingIO{l: l, idx: l.issued}
			if !r.wait(&p) {
				return len(r.p.Steps)
			}
		}
	}
	return -1
}
