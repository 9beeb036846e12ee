package collective

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/cohortml/cohort/distributed/transport"
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
	hdr   [headerLen]byte // this rank's header for the running op

	// Staging for inline plans' messages that carry the header.
	sendStage, recvStage, leftStage []byte
	staged                          [][]byte
	got                             []bool

	// cur is the state of the running op.
	cur run
	// fold is cur.foldPiece, made once (a method value made per receive
	// would be an allocation each time).
	fold func(off int, q []byte)

	// Per-peer transfer queues, each worked by one goroutine started on
	// first use and stopped by Close.
	sends, recvs []*link
	stop         chan struct{}
	wg           sync.WaitGroup
	closed       bool
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
	e := &Executor{t: t, group: group, ranks: append([]int(nil), ranks...), rank: me,
		sends: make([]*link, len(ranks)), recvs: make([]*link, len(ranks)), stop: make(chan struct{})}
	e.fold = func(off int, q []byte) { e.cur.foldPiece(off, q) }
	return e, nil
}

// Close stops the executor's goroutines. It must not run concurrently with
// Run; Run after Close fails.
func (e *Executor) Close() error {
	if !e.closed {
		e.closed = true
		close(e.stop)
		e.wg.Wait()
	}
	return nil
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
// An Inline plan runs on the caller's goroutine, step after step. Other
// plans hand sends and receives to one goroutine per peer and direction,
// which work through them in plan order; a step waits only for the earlier
// transfers whose memory it touches, so receiving overlaps with reducing
// and forwarding. Run returns once every transfer is done: on success every
// buffer is settled; on failure (the first error, wrapped in a *StepError,
// or a *DesyncError) nothing is left running and the contents of out are
// unspecified.
func (e *Executor) Run(ctx context.Context, seq uint64, p *Plan, in, out []byte) error {
	if e.closed {
		return errors.New("collective: Run on a closed executor")
	}
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
	// The run state is reused from op to op (Run returns only once every
	// transfer it issued is done), keeping its slices' memory.
	r := &e.cur
	*r = run{
		e:       e,
		p:       p,
		seq:     seq,
		es:      es,
		bufs:    [3][]byte{Out: out, In: in, Tmp: u64Bytes(e.tmp)},
		got:     e.flags(&e.got),
		pending: r.pending[:0],
		used:    r.used[:0],
		wake:    r.wake,
	}
	if err := r.checkBounds(); err != nil {
		return err
	}
	h := header{group: e.group, rank: uint32(e.rank), seq: seq, call: p.Call}
	h.encode(e.hdr[:])
	r.peers()
	if p.Inline {
		return r.inline(ctx)
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

	// announce and check list the group ranks this rank sends its header
	// to and checks the header of; left is the ring neighbour checked
	// first (−1 if none).
	announce, check []int
	left            int
	got             []bool // header from group rank g checked

	// The reduce a folded receive feeds (see setFold).
	foldDst, foldOther []byte
	foldFirst          bool // the message is the reduce's first operand

	ctx     context.Context
	cancel  context.CancelFunc
	wake    chan struct{}
	mu      sync.Mutex
	err     error
	pending []pendingIO
	used    []*link
}

// link is the queue of transfers to or from one peer, worked through in
// order by one goroutine of the executor.
type link struct {
	peer   int // group rank
	send   bool
	mu     sync.Mutex
	q      []job
	head   int
	kick   chan struct{}
	issued int64 // jobs ever queued; Run's goroutine only
	done   atomic.Int64
	hdr    [headerLen]byte // recv links: the peer's header for the running op
}

type job struct {
	r    *run
	step int // plan index, −1 for the op header
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

// peers takes who exchanges headers from the plan (see checkPeers).
func (r *run) peers() {
	if r.p.announce == nil && r.p.check == nil { // world of one, or a Plan not from NewPlan
		r.check, r.left = checkPeers(r.p)
		r.announce = announcePeers(r.p)
		return
	}
	r.check, r.left, r.announce = r.p.check, r.p.left, r.p.announce
}

func (r *run) bytes(reg Region) []byte {
	return r.bufs[reg.Buf][reg.Off*r.es : reg.end()*r.es]
}

func (r *run) tag(step int, msg uint32) transport.Tag {
	t := transport.Tag{Group: r.e.group, Seq: r.seq, Step: msg + 1}
	if step < 0 {
		t.Step = 0
	}
	return t
}

func (r *run) transferErr(send bool, step, peer int, err error) error {
	var de *DesyncError
	if errors.As(err, &de) {
		return err
	}
	if _, ok := err.(*StepError); ok { // explained already (a bad header)
		return err
	}
	tr := r.e.ranks[peer]
	what := fmt.Sprintf("send to rank %d", tr)
	if !send {
		what = fmt.Sprintf("recv from rank %d", tr)
	}
	return &StepError{Algo: r.p.Algo, Call: r.p.Call, Seq: r.seq, Step: step, What: what, Peer: tr, Err: err}
}

// compute performs a local step.
func (r *run) compute(s Step) {
	c := r.p.Call
	switch s.Kind {
	case StepReduce:
		reduceBytes(c.DType, c.Op, r.bytes(s.Dst), r.bytes(s.Src), r.bytes(s.Src2))
	case StepCopy:
		if dst, src := r.bytes(s.Dst), r.bytes(s.Src); len(dst) > 0 && unsafe.SliceData(dst) != unsafe.SliceData(src) {
			copy(dst, src) // the same bytes: an in-place all-gather's own chunk
		}
	case StepAvg:
		scaleBytes(c.DType, r.bytes(s.Dst), r.p.Size)
	}
}

// setFold prepares Executor.fold for a receive into x folded into the
// reduce step next (see foldable).
func (r *run) setFold(x Region, next Step) {
	r.foldDst, r.foldOther, r.foldFirst = r.bytes(next.Dst), r.bytes(next.Src2), true
	if next.Src != x {
		r.foldOther, r.foldFirst = r.bytes(next.Src), false
	}
}

// foldPiece reduces piece q of a folded receive's message, its bytes from
// off on, into the reduce's destination, keeping the operands' order.
func (r *run) foldPiece(off int, q []byte) {
	c := r.p.Call
	dst, other := r.foldDst[off:off+len(q)], r.foldOther[off:off+len(q)]
	if r.foldFirst {
		reduceBytes(c.DType, c.Op, dst, q, other)
	} else {
		reduceBytes(c.DType, c.Op, dst, other, q)
	}
}

// inline runs the plan on the calling goroutine. The op header travels
// in front of the first message when the plan starts with a send, and
// alone to the other peers that expect one; either way as the one message
// under step 0 of the op's tag, so that a peer running another op finds
// it, and a wrong length or header, where it looks. The left neighbour's first
// message is taken first (it is always sent at once, so waiting for it
// cannot deadlock, and checking it first guarantees that some rank notices
// a mismatch); the other peers' headers are checked on first contact.
func (r *run) inline(ctx context.Context) error {
	t, ranks, steps := r.e.t, r.e.ranks, r.p.Steps
	first := -1 // peer whose first message carries the header
	if carriesHeader(r.p, r.es) {
		s := steps[0]
		first = s.Peer
		msg := r.e.stage(&r.e.sendStage, headerLen+s.Src.Len*r.es)
		copy(msg, r.e.hdr[:])
		copy(msg[headerLen:], r.bytes(s.Src))
		if err := transport.SendEager(ctx, t, ranks[first], r.tag(-1, 0), msg); err != nil {
			return r.inlineErr(ctx, true, 0, first, err)
		}
	}
	for _, g := range r.announce {
		if g != first {
			if err := transport.SendEager(ctx, t, ranks[g], r.tag(-1, 0), r.e.hdr[:]); err != nil {
				return r.inlineErr(ctx, true, -1, g, err)
			}
		}
	}
	// staged[g] holds the payload of g's combined first message once
	// received, until its step comes.
	staged := e2slices(&r.e.staged, len(ranks))
	// firstRecv returns the index of this rank's first receive from g.
	firstRecv := func(g int) int {
		for i, s := range steps {
			if s.Kind == StepRecv && s.Peer == g {
				return i
			}
		}
		return -1
	}
	hello := func(g int) error { // receive and check g's header
		if !slices.Contains(r.p.CombinedFrom, g) {
			var hdr [headerLen]byte
			if err := t.Recv(ctx, ranks[g], r.tag(-1, 0), hdr[:]); err != nil {
				if errors.Is(err, transport.ErrLength) {
					return r.lengthMismatch(g, err)
				}
				return r.inlineErr(ctx, false, -1, g, err)
			}
			if err := r.checkHeader(g, hdr[:]); err != nil {
				return err
			}
			r.got[g] = true
			return nil
		}
		i := firstRecv(g)
		s := steps[i]
		buf := &r.e.recvStage
		if g == r.left {
			buf = &r.e.leftStage
		}
		msg := r.e.stage(buf, headerLen+s.Dst.Len*r.es)
		if err := t.Recv(ctx, ranks[g], r.tag(-1, 0), msg); err != nil {
			if errors.Is(err, transport.ErrLength) {
				return r.lengthMismatch(g, err)
			}
			return r.inlineErr(ctx, false, -1, g, err)
		}
		if err := r.checkHeader(g, msg[:headerLen]); err != nil {
			return err
		}
		r.got[g] = true
		staged[g] = msg[headerLen:]
		return nil
	}
	if r.left >= 0 {
		if err := hello(r.left); err != nil {
			return err
		}
	}
	for i := 0; i < len(steps); i++ {
		s := steps[i]
		switch {
		case i == 0 && first >= 0:
			// sent with the header
		case s.Kind == StepSend:
			if err := transport.SendEager(ctx, t, ranks[s.Peer], r.tag(i, s.Msg), r.bytes(s.Src)); err != nil {
				return r.inlineErr(ctx, true, i, s.Peer, err)
			}
		case s.Kind == StepRecv:
			if !r.got[s.Peer] {
				if err := hello(s.Peer); err != nil {
					return err
				}
			}
			at := i // the receive's step; a folded one takes the reduce after it along
			fold := r.p.folds != nil && r.p.folds[at]
			if fold {
				// The reduce after the receive takes the message's
				// pieces as they come (see foldable).
				r.setFold(s.Dst, steps[at+1])
				i++
			}
			if p := staged[s.Peer]; p != nil {
				if fold {
					r.e.fold(0, p)
				} else {
					copy(r.bytes(s.Dst), p)
				}
				staged[s.Peer] = nil
				continue
			}
			var err error
			if fold {
				err = transport.RecvFold(ctx, t, ranks[s.Peer], r.tag(at, s.Msg), r.bytes(s.Dst), r.es, r.e.fold)
			} else {
				err = t.Recv(ctx, ranks[s.Peer], r.tag(at, s.Msg), r.bytes(s.Dst))
			}
			if err != nil {
				return r.inlineErr(ctx, false, at, s.Peer, err)
			}
		default:
			r.compute(s)
		}
	}
	for _, g := range r.check {
		if !r.got[g] {
			if err := hello(g); err != nil {
				return err
			}
		}
	}
	return nil
}

// flags returns *b cleared, sized for the group.
func (e *Executor) flags(b *[]bool) []bool {
	if len(*b) != len(e.ranks) {
		*b = make([]bool, len(e.ranks))
	}
	clear(*b)
	return *b
}

// e2slices returns *b cleared, n long.
func e2slices(b *[][]byte, n int) [][]byte {
	if len(*b) != n {
		*b = make([][]byte, n)
	}
	clear(*b)
	return *b
}

// stage returns n bytes of the staging buffer *b, growing it if needed.
func (e *Executor) stage(b *[]byte, n int) []byte {
	if cap(*b) < n {
		*b = make([]byte, n)
	}
	return (*b)[:n]
}

// inlineErr explains a failed transfer of an inline plan. When the op
// timed out, it first looks (briefly) for the headers of the peers not yet
// heard from, so that the error names the ranks that have not started the
// op rather than the neighbour that is waiting for them too.
func (r *run) inlineErr(ctx context.Context, send bool, step, peer int, err error) error {
	if ctx.Err() == nil || isPeerErr(err) {
		return r.transferErr(send, step, peer, err)
	}
	if localCancel(ctx) {
		return r.stalled(ctx, step)
	}
	if step < 0 && !send {
		r.got[peer] = false // its header is the one missing
	} else {
		peer = -1
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		probe, cancel := context.WithTimeout(context.Background(), probeTime)
		defer cancel()
		var hdr [headerLen]byte
		for _, g := range r.check {
			if !r.got[g] && g != peer && r.e.t.Recv(probe, r.e.ranks[g], r.tag(-1, 0), hdr[:]) == nil {
				r.got[g] = true
			}
		}
	}
	missing := r.stalled(ctx, step)
	if se, ok := missing.(*StepError); ok && se.Step < 0 {
		return se
	}
	if step >= 0 {
		s := r.p.Steps[step]
		return &StepError{Algo: r.p.Algo, Call: r.p.Call, Seq: r.seq, Step: step,
			What: "waiting on " + r.describe(s), Peer: r.e.ranks[s.Peer], Err: ctx.Err()}
	}
	return missing
}

// probeTime bounds the look for missing headers after a timeout.
const probeTime = 20 * time.Millisecond

// exec runs a plan with the per-peer goroutines.
func (r *run) exec(parent context.Context) error {
	r.ctx, r.cancel = context.WithCancel(parent)
	defer r.cancel()
	if r.wake == nil {
		r.wake = make(chan struct{}, 1)
	}
	// A wake-up left over from the previous op is harmless: every wait
	// on wake re-checks its condition.
	for _, g := range r.announce {
		r.issue(r.e.link(g, true), job{step: -1, p: r.e.hdr[:]})
	}
	for _, g := range r.check {
		l := r.e.link(g, false)
		r.issue(l, job{step: -1, p: l.hdr[:]})
	}
	failed := r.steps()
	// Drain: every queued job finishes (quickly, once the op has failed)
	// before Run returns, so no goroutine touches the buffers afterwards.
	for _, l := range r.used {
		for l.done.Load() < l.issued {
			<-r.wake
		}
	}
	if err := r.firstErr(); err != nil {
		return err
	}
	if failed >= 0 {
		return r.stalled(parent, failed)
	}
	return nil
}

// link returns the queue to (send) or from group rank g, starting its
// goroutine on first use.
func (e *Executor) link(g int, send bool) *link {
	ls := e.recvs
	if send {
		ls = e.sends
	}
	if ls[g] == nil {
		l := &link{peer: g, send: send, kick: make(chan struct{}, 1)}
		ls[g] = l
		e.wg.Go(func() { e.work(l) })
	}
	return ls[g]
}

// issue queues a job on its link and returns the link's job count.
func (r *run) issue(l *link, j job) int64 {
	j.r = r
	if !slices.Contains(r.used, l) {
		r.used = append(r.used, l)
	}
	l.mu.Lock()
	l.q = append(l.q, j)
	l.mu.Unlock()
	select {
	case l.kick <- struct{}{}:
	default:
	}
	l.issued++
	return l.issued
}

// work is a link's goroutine: it performs the queued jobs in order until
// the executor closes, skipping (but counting) those of a failed op.
func (e *Executor) work(l *link) {
	for {
		l.mu.Lock()
		if l.head == len(l.q) {
			l.q, l.head = l.q[:0], 0
			l.mu.Unlock()
			select {
			case <-l.kick:
				continue
			case <-e.stop:
				return
			}
		}
		j := l.q[l.head]
		l.q[l.head] = job{}
		l.head++
		l.mu.Unlock()
		wake := j.r.wake // read before done: once done counts the job, the run may be reused
		j.r.perform(l, j)
		l.done.Add(1)
		select {
		case wake <- struct{}{}:
		default:
		}
	}
}

// perform does one transfer of run r, recording a failure (a panic in
// the transport included: it must not take the process down from a
// goroutine the caller does not own).
func (r *run) perform(l *link, j job) {
	if r.ctx.Err() != nil {
		return
	}
	defer func() {
		if p := recover(); p != nil {
			r.fail(r.transferErr(l.send, j.step, l.peer, fmt.Errorf("panic: %v", p)))
		}
	}()
	var err error
	if l.send {
		err = r.e.t.Send(r.ctx, r.e.ranks[l.peer], r.tag(j.step, j.msg), j.p)
	} else {
		err = r.e.t.Recv(r.ctx, r.e.ranks[l.peer], r.tag(j.step, j.msg), j.p)
		switch {
		case err == nil && j.step < 0:
			if err = r.checkHeader(l.peer, j.p); err == nil {
				r.got[l.peer] = true
			}
		case j.step < 0 && errors.Is(err, transport.ErrLength):
			err = r.lengthMismatch(l.peer, err)
		}
	}
	if err != nil {
		if r.ctx.Err() != nil && !isPeerErr(err) {
			return // stopped by ctx: reported by stalled
		}
		r.fail(r.transferErr(l.send, j.step, l.peer, err))
	}
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

// stalled explains an op stopped by ctx: which peers never started it, or
// else which step it was waiting for.
//
// A wait that this rank's own caller cancelled (not one that ran out of
// time) says so and names no peer: the peers may well be fine, and the
// text travels to them in the abort notice.
func (r *run) stalled(parent context.Context, step int) error {
	err := parent.Err()
	if err == nil {
		err = context.Canceled
	}
	if localCancel(parent) {
		return &StepError{Algo: r.p.Algo, Call: r.p.Call, Seq: r.seq, Step: step, What: "cancelled locally", Peer: -1, Err: err}
	}
	var missing []string
	peer := -1
	for _, g := range r.check {
		if !r.got[g] {
			missing = append(missing, fmt.Sprint(r.e.ranks[g]))
			if peer < 0 {
				peer = r.e.ranks[g]
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

// localCancel reports whether ctx ended by cancellation rather than by
// its deadline.
func localCancel(ctx context.Context) bool {
	return ctx.Err() != nil && !errors.Is(ctx.Err(), context.DeadlineExceeded)
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

func isPeerErr(err error) bool {
	var pe *transport.PeerError
	return errors.As(err, &pe)
}

// checkHeader compares group rank g's header with this rank's call.
func (r *run) checkHeader(g int, p []byte) error {
	h, err := decodeHeader(p)
	if err == nil && (h.group != r.e.group || h.seq != r.seq || int(h.rank) != g) {
		err = fmt.Errorf("collective: op header for group %d seq %d rank %d, want group %d seq %d rank %d",
			h.group, h.seq, h.rank, r.e.group, r.seq, g)
	}
	if err != nil {
		return r.transferErr(false, -1, g, err)
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
		pc := theirs // escapes only here, so a matching header allocates nothing
		return &DesyncError{Group: r.e.group, Seq: r.seq,
			Rank: r.e.ranks[r.e.rank], Call: mine, Peer: r.e.ranks[g], PeerCall: &pc}
	}
	return nil
}

// lengthMismatch explains a first message from group rank g (the one under
// step 0 of the op's tag, which starts with g's header) whose length does
// not fit this rank's call. The transport's *transport.LengthError carries
// the message's first bytes: when they hold a header, it is checked as if
// received alone (a *DesyncError naming g's call, or an error naming a
// header of another op), and if g's call matches, the error says the ranks
// planned the same call differently. Without a header the result is a
// *DesyncError with PeerCall nil.
func (r *run) lengthMismatch(g int, err error) error {
	var le *transport.LengthError
	if errors.As(err, &le) && len(le.Prefix) >= headerLen {
		if _, herr := decodeHeader(le.Prefix[:headerLen]); herr == nil {
			if cerr := r.checkHeader(g, le.Prefix[:headerLen]); cerr != nil {
				return cerr
			}
			return r.transferErr(false, -1, g, fmt.Errorf(
				"rank %d runs the same call with another plan (are the algorithm and tuning options the same on every rank?): %w",
				r.e.ranks[g], err))
		}
	}
	mine := r.p.Call
	if mine.Kind == Send || mine.Kind == Recv {
		mine.Peer = r.e.ranks[mine.Peer]
	}
	return &DesyncError{Group: r.e.group, Seq: r.seq, Rank: r.e.ranks[r.e.rank], Call: mine, Peer: r.e.ranks[g]}
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
			l := r.e.sends[s.Peer]
			idx := r.issue(l, job{step: i, msg: s.Msg, p: r.bytes(s.Src)})
			r.pending = append(r.pending, pendingIO{reg: s.Src, l: l, idx: idx})
		case StepRecv:
			if !r.settle(nil, s.Dst) {
				return i
			}
			l := r.e.recvs[s.Peer]
			idx := r.issue(l, job{step: i, msg: s.Msg, p: r.bytes(s.Dst)})
			r.pending = append(r.pending, pendingIO{reg: s.Dst, write: true, l: l, idx: idx})
		default:
			reads[0], reads[1] = s.Src, s.Src2
			if !r.settle(reads[:2], s.Dst) {
				return i
			}
			r.compute(s)
		}
	}
	// Wait for everything in flight, headers included.
	for _, l := range r.used {
		p := pendingIO{l: l, idx: l.issued}
		if !r.wait(&p) {
			return len(r.p.Steps)
		}
	}
	r.pending = r.pending[:0]
	return -1
}
