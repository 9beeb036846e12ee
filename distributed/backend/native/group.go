package native

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cohortml/cohort/distributed"
	"github.com/cohortml/cohort/distributed/collective"
	"github.com/cohortml/cohort/distributed/transport"
)

// validateGroup checks the group options this backend reads.
func validateGroup(o distributed.GroupOptions) error {
	if o.Timeout < 0 {
		return fmt.Errorf("distributed: GroupOptions.Timeout %v is negative", o.Timeout)
	}
	for k, name := range o.Algorithms {
		found := false
		for _, a := range collective.Algorithms(k) {
			found = found || a == name
		}
		if !found {
			return fmt.Errorf("distributed: GroupOptions.Algorithms: no %v algorithm %q (have %v)", k, name, collective.Algorithms(k))
		}
	}
	return nil
}

// New returns the group of all ranks of transport t, which the group owns
// (see GroupOptions.KeepTransport). Every rank calls New with its own
// endpoint of the same transport. distributed.Init and InitFromEnv build
// the transport from a store or the environment and call New.
func New(t transport.Transport, opts distributed.GroupOptions) (distributed.ProcessGroup, error) {
	if err := validateGroup(opts); err != nil {
		return nil, err
	}
	if opts.Timeout == 0 {
		opts.Timeout = distributed.DefaultTimeout
	}
	ranks := make([]int, t.Size())
	for i := range ranks {
		ranks[i] = i
	}
	return newGroup(t, !opts.KeepTransport, 0, ranks, opts)
}

// group is cohort's ProcessGroup over a transport.
//
// Ops are queued by the calling goroutine and run one at a time, in issue
// order, by the group's op goroutine, which owns the executor and the plan
// cache. A failed op breaks the group: the op goroutine records the first
// failure, cancels the running op, fails every queued and later op with an
// *OpError wrapping ErrAborted, and sends an abort notice to every peer;
// one listener goroutine per peer waits for the peers' notices. Close
// stops all of them.
type group struct {
	t     transport.Transport
	owns  bool
	id    uint32
	ranks []int // global rank of each group rank
	rank  int   // this process's group rank
	me    int   // this process's global rank
	opts  distributed.GroupOptions
	// closeLast releases what the group owns besides the transport (the
	// store of InitFromEnv), after the transport.
	closeLast func() error
	// job is the job's nonce (see join.go) for a world group made by
	// Init; "" otherwise. JobID returns it.
	job   string
	exec  *collective.Executor
	plans map[planKey]*collective.Plan // op goroutine only

	ctx    context.Context // ends when the group breaks or closes
	cancel context.CancelFunc
	kick   chan struct{}
	wg     sync.WaitGroup

	mu       sync.Mutex
	queue    []*op
	running  *op
	seq      uint64
	p2p      map[p2pKey]uint32
	broken   *distributed.OpError
	closed   bool
	children []*group
	nchild   uint32
	flight   flightRecorder // the last ops, for the watchdog (flight.go)
}

var _ distributed.ProcessGroup = (*group)(nil)

type planKey struct {
	call collective.Call
	algo string
}

type p2pKey struct {
	peer, tag int
	send      bool
}

// op is one queued call; it is its own Work.
type op struct {
	g       *group
	call    collective.Call
	in, out []byte
	ctx     context.Context
	seq     uint64
	err     error // invalid arguments, reported when the op's turn comes
	// flightSlot is the op's place in the group's flight recorder.
	flightSlot uint64
	// runCtx is the context the op runs under (set by run).
	runCtx opCtx

	// waited: a caller reached Wait or Done (see Waited).
	waited atomic.Bool

	done   chan struct{}
	result error // set before done is closed
}

func newGroup(t transport.Transport, owns bool, id uint32, ranks []int, opts distributed.GroupOptions) (*group, error) {
	exec, err := collective.NewExecutor(t, id, ranks)
	if err != nil {
		return nil, fmt.Errorf("distributed: %w", err)
	}
	g := &group{
		t:     t,
		owns:  owns,
		id:    id,
		ranks: ranks,
		rank:  exec.Rank(),
		me:    t.Rank(),
		opts:  opts,
		exec:  exec,
		plans: make(map[planKey]*collective.Plan),
		kick:  make(chan struct{}, 1),
		p2p:   make(map[p2pKey]uint32),
	}
	g.ctx, g.cancel = context.WithCancel(context.Background())
	g.wg.Go(g.loop)
	for p := range ranks {
		if p != g.rank {
			g.wg.Go(func() { g.listen(p) })
		}
	}
	return g, nil
}

// BackendName is the name the backend is registered under (distributed.BackendName).
func (g *group) BackendName() string { return "native" }

func (g *group) Rank() int { return g.rank }
func (g *group) Size() int { return len(g.ranks) }

// Wait blocks until the op is done and returns its error. When the op is
// next in line and no other op is running, the waiting goroutine runs it
// itself instead of handing it to the op goroutine and waiting to be
// woken: on a fast transport the hand-offs would cost more than the op.
func (o *op) Wait() error {
	select {
	case <-o.done:
		return o.result
	default:
	}
	o.waited.Store(true)
	if o.g.claim(o) {
		o.g.run(o)
		o.g.wg.Done()
	}
	<-o.done
	return o.result
}

// Done is closed when the op is done. Whoever asks for it is taken to
// wait for it (see Waited).
func (o *op) Done() <-chan struct{} {
	o.waited.Store(true)
	return o.done
}

// SendsBuffered reports that the group's sends complete without waiting
// for the matching receive: they land in a ring, a socket or a queue on
// every transport (see distributed.SendsBuffered).
func (g *group) SendsBuffered() bool { return true }

// Completion returns the channel closed when the op is done, without
// counting as waiting for it (see distributed.Completion).
func (o *op) Completion() <-chan struct{} { return o.done }

// Waited reports whether a caller has reached Wait or Done: until then
// the op runs ahead on the op goroutine, and the transport need not poll
// for its messages (transport.WaitHint).
func (o *op) Waited() bool { return o.waited.Load() }

func (o *op) finish(err error) {
	o.result = err
	close(o.done)
}

// submit queues an op and returns its Work.
func (g *group) submit(ctx context.Context, c collective.Call, in, out []byte, err error) distributed.Work {
	if ctx == nil {
		ctx = context.Background()
	}
	o := &op{g: g, call: c, in: in, out: out, ctx: ctx, err: err, done: make(chan struct{})}
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		o.finish(&distributed.OpError{Op: c.Kind.String(), Rank: g.me, Peer: -1, Err: distributed.ErrClosed})
		return o
	}
	if c.Kind == collective.Send || c.Kind == collective.Recv {
		k := p2pKey{peer: c.Peer, tag: c.Tag, send: c.Kind == collective.Send}
		g.p2p[k]++
		o.seq = 1<<63 | uint64(uint32(c.Tag))<<32 | uint64(g.p2p[k])
	} else {
		g.seq++
		o.seq = g.seq
	}
	g.flight.enqueue(o)
	g.queue = append(g.queue, o)
	g.mu.Unlock()
	g.kickLoop()
	return o
}

func (g *group) kickLoop() {
	select {
	case g.kick <- struct{}{}:
	default:
	}
}

// claim takes o off the queue for the calling goroutine to run, if o is
// next and nothing runs. The caller then calls run and g.wg.Done.
func (g *group) claim(o *op) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed || g.running != nil || len(g.queue) == 0 || g.queue[0] != o {
		return false
	}
	g.queue[0] = nil
	g.queue = g.queue[1:]
	g.running = o
	g.wg.Add(1) // Close waits for the op, as for the op goroutine
	return true
}

// loop is the op goroutine.
func (g *group) loop() {
	for {
		o := g.next()
		if o == nil {
			return
		}
		g.run(o)
	}
}

// run runs o, which the caller has made g.running, and finishes it.
func (g *group) run(o *op) {
	g.flight.start(o)
	err := g.execute(o)
	g.flight.end(o, err)
	g.mu.Lock()
	g.running = nil
	more := len(g.queue) > 0
	g.mu.Unlock()
	o.finish(err)
	if more {
		g.kickLoop() // an op queued behind o, perhaps with no one waiting for it
	}
}

// next returns the next queued op, or nil once the group is closed.
func (g *group) next() *op {
	for {
		g.mu.Lock()
		if g.closed {
			g.mu.Unlock()
			return nil
		}
		if len(g.queue) > 0 && g.running == nil {
			o := g.queue[0]
			g.queue[0] = nil
			g.queue = g.queue[1:]
			g.running = o
			g.mu.Unlock()
			return o
		}
		g.mu.Unlock()
		<-g.kick
	}
}

func (g *group) opError(o *op, peer int, err error) *distributed.OpError {
	return &distributed.OpError{Op: o.call.Kind.String(), Seq: o.seq, Rank: g.me, Peer: peer, Err: err}
}

// brokenErr returns the error for an op that cannot run because the group
// is broken or closed, or nil.
func (g *group) brokenErr(o *op) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case g.broken != nil:
		return g.opError(o, g.broken.Peer, g.broken)
	case g.closed:
		return g.opError(o, -1, distributed.ErrClosed)
	}
	return nil
}

func (g *group) execute(o *op) (err error) {
	if err := g.brokenErr(o); err != nil {
		return err
	}
	defer func() {
		// Never let a panic escape the op goroutine: it breaks the group.
		if p := recover(); p != nil {
			oe := g.opError(o, -1, fmt.Errorf("distributed: panic: %v", p))
			g.abort(oe, true)
			err = oe
		}
	}()
	if o.err != nil {
		oe := g.opError(o, -1, o.err)
		g.abort(oe, true)
		return oe
	}
	p, err := g.plan(o.call)
	if err != nil {
		oe := g.opError(o, -1, err)
		g.abort(oe, true)
		return oe
	}
	ctx := &o.runCtx
	ctx.init(o.ctx, g.ctx, time.Now().Add(g.opts.Timeout), o)
	err = g.exec.Run(ctx, o.seq, p, o.in, o.out)
	ctx.release()
	if err == nil {
		return nil
	}
	var de *collective.DesyncError
	if isPeerErr(err) || errors.As(err, &de) && de.PeerCall == nil {
		// A peer that broke its group sends an abort notice, then may
		// close or exit before this op hears from it; a peer in another op
		// may have seen more of the mismatch than this rank. Give its
		// notice a moment to arrive, since it says why.
		select {
		case <-g.ctx.Done():
		case <-time.After(noticeGrace):
		}
	}
	if e := g.brokenErr(o); e != nil {
		return e // aborted or closed while running
	}
	oe := g.opError(o, peerOf(err), err)
	g.abort(oe, true)
	return oe
}

// plan returns the (cached) plan for a call.
func (g *group) plan(c collective.Call) (*collective.Plan, error) {
	k := planKey{call: c, algo: g.opts.Algorithms[c.Kind]}
	if p, ok := g.plans[k]; ok {
		return p, nil
	}
	p, err := collective.NewPlan(c, len(g.ranks), g.rank, k.algo, g.opts.Tuning)
	if err != nil {
		return nil, err
	}
	if len(g.plans) >= 256 {
		clear(g.plans)
	}
	g.plans[k] = p
	return p, nil
}

// abort breaks the group with cause (the first caller wins) and, if
// notify, tells every peer.
func (g *group) abort(cause *distributed.OpError, notify bool) {
	g.mu.Lock()
	if g.broken != nil || g.closed {
		g.mu.Unlock()
		return
	}
	g.broken = cause
	g.mu.Unlock()
	g.cancel()
	if notify {
		g.notify(cause)
	}
}

// noticeGrace is how long an op failed by a peer's departure waits for
// that peer's abort notice.
const noticeGrace = 100 * time.Millisecond

func isPeerErr(err error) bool {
	var pe *transport.PeerError
	return errors.As(err, &pe)
}

func (g *group) noticeTag() transport.Tag { return transport.Tag{Group: g.id, Seq: noticeSeq} }

// notify sends cause to every peer, each send bounded by a short timeout.
func (g *group) notify(cause *distributed.OpError) {
	msg := encodeNotice(cause)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	for p, tr := range g.ranks {
		if p != g.rank {
			_ = g.t.Send(ctx, tr, g.noticeTag(), msg) // best effort: the peer may be dead
		}
	}
}

// listen waits for an abort notice from group rank p.
func (g *group) listen(p int) {
	defer func() {
		if v := recover(); v != nil {
			g.abort(&distributed.OpError{Op: "abort notice", Rank: g.me, Peer: g.ranks[p], Err: fmt.Errorf("distributed: panic: %v", v)}, true)
		}
	}()
	msg := make([]byte, noticeLen)
	if err := g.t.Recv(g.ctx, g.ranks[p], g.noticeTag(), msg); err != nil {
		return // closed, broken, or the peer went away (its ops report that)
	}
	cause, err := decodeNotice(msg, g.ranks[p])
	if err != nil {
		cause = &distributed.OpError{Op: "abort notice", Rank: g.me, Peer: g.ranks[p], Err: err}
	}
	g.abort(cause, false)
}

// Close fails every queued op, stops the running one (telling the peers,
// which may be waiting for it), waits for the group's goroutines, closes
// its subgroups and, if the group owns it, the transport.
func (g *group) Close() error {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return nil
	}
	g.closed = true
	pending := g.queue
	g.queue = nil
	running := g.running
	broken := g.broken
	children := g.children
	g.mu.Unlock()

	if broken == nil && (running != nil || len(pending) > 0) {
		o := running
		if o == nil {
			o = pending[0]
		}
		g.notify(g.opError(o, -1, distributed.ErrClosed))
	}
	for _, o := range pending {
		o.finish(g.opError(o, -1, distributed.ErrClosed))
	}
	g.cancel()
	g.kickLoop()
	g.wg.Wait()
	g.exec.Close()
	var errs []error
	for _, c := range children {
		errs = append(errs, c.Close())
	}
	if g.owns {
		errs = append(errs, g.t.Close())
	}
	if g.closeLast != nil {
		errs = append(errs, g.closeLast())
	}
	return errors.Join(errs...)
}

// NewGroup implements distributed.NewGroup.
func (g *group) NewGroup(ctx context.Context, ranks []int) (distributed.ProcessGroup, error) {
	if len(ranks) == 0 {
		return nil, fmt.Errorf("distributed: NewGroup: empty rank list")
	}
	seen := make(map[int]bool, len(ranks))
	h := fnv.New32a()
	for _, r := range ranks {
		if r < 0 || r >= len(g.ranks) {
			return nil, fmt.Errorf("distributed: NewGroup: rank %d out of range [0, %d)", r, len(g.ranks))
		}
		if seen[r] {
			return nil, fmt.Errorf("distributed: NewGroup: rank %d listed twice", r)
		}
		seen[r] = true
		_ = binary.Write(h, binary.LittleEndian, int32(r))
	}
	g.mu.Lock()
	g.nchild++
	idx := g.nchild
	g.mu.Unlock()
	c := collective.Call{Kind: collective.Agree, Count: len(ranks), Root: int(int32(h.Sum32()))}
	if err := g.submit(ctx, c, nil, nil, nil).Wait(); err != nil {
		return nil, err
	}
	global, member := distributed.Members(ranks, g.ranks, g.rank)
	if member < 0 {
		return nil, nil
	}
	id := fnv.New32a()
	_ = binary.Write(id, binary.LittleEndian, [2]uint32{g.id, idx})
	cid := id.Sum32()
	if cid == 0 {
		cid = 1
	}
	child, err := newGroup(g.t, false, cid, global, g.opts)
	if err != nil {
		return nil, err
	}
	g.watchChild(child)
	g.mu.Lock()
	closed := g.closed
	if !closed {
		g.children = append(g.children, child)
	}
	g.mu.Unlock()
	if closed {
		child.Close()
		return nil, fmt.Errorf("distributed: NewGroup: %w", distributed.ErrClosed)
	}
	return child, nil
}
