package shm

import (
	"context"
	"errors"
	"fmt"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"cohort/dist/transport"
	"cohort/dist/transport/internal/demux"
	"cohort/dist/wire"
)

const (
	// recordAlign aligns every record in a ring, so a header never wraps.
	recordAlign = wire.HeaderBytes
	// publishBytes is how much of a long message a sender copies before
	// publishing it, so the receiver copies out while the sender copies in.
	publishBytes = 64 << 10
	// sleepMax bounds every futex sleep, a backstop for missed wake-ups;
	// state changes (close, death) wake sleepers explicitly.
	sleepMax = 50 * time.Millisecond
)

var (
	errPeerClosed   = errors.New("closed its transport")
	errPeerVanished = errors.New("connection closed without a goodbye (process exited?)")
	errCancelledMid = errors.New("a send was cancelled in the middle of a message; the link cannot be resynchronised")
	errLocalClose   = errors.New("link closed by this rank")
)

// Transport is one rank's view of the shared-memory rings. It is safe for
// concurrent use.
type Transport struct {
	rank, size int
	opts       Options
	own        *segment   // this rank's segment: its inbound rings
	peers      []*peer    // by rank; nil at this rank and at ranks that are not peers
	self       *demux.Box // messages to itself
	closed     atomic.Bool
	closeOnce  sync.Once
	pollerDone chan struct{}
	// progress is held by whoever copies records out of the inbound
	// rings: the progress goroutine, or a receiver polling for its own
	// message.
	progress sync.Mutex
	// mapped is read-held by receivers while they touch the mappings
	// outside progress; Close write-locks it for good before unmapping.
	mapped sync.RWMutex
}

var _ transport.Transport = (*Transport)(nil)

// peer is everything about one other rank.
type peer struct {
	t    *Transport
	rank int

	// Outbound: this rank produces into its slot of the peer's segment.
	seg          *segment
	out          ring
	peerDoorbell *uint32
	peerSleeping *uint32
	peerPolling  *uint32
	mu           sync.Mutex // one sender at a time; guards outHead
	outHead      uint64
	sendErr      atomic.Pointer[transport.PeerError] // outbound side down

	// Inbound: the peer's slot of this rank's segment, consumed by
	// whoever holds Transport.progress.
	in          ring
	box         *demux.Box
	inTail      uint64     // guarded by Transport.progress
	cur         *demux.Msg // message being copied out; guarded by Transport.progress
	curRem      uint64     // its payload bytes still to copy
	curPad      uint64     // its padding after the payload
	gone        atomic.Pointer[error]
	settled     bool        // the box has been failed after gone; guarded by Transport.progress
	settledFlag atomic.Bool // settled, for readers without the lock

	// Liveness channel.
	conn       net.Conn
	wmu        sync.Mutex
	readerDone chan struct{}
}

// Rank returns this transport's rank.
func (t *Transport) Rank() int { return t.rank }

// Size returns the world size.
func (t *Transport) Size() int { return t.size }

func (t *Transport) check(op string, r int) error {
	if r < 0 || r >= t.size {
		return fmt.Errorf("shm: rank %d: %s rank %d: out of range [0, %d)", t.rank, op, r, t.size)
	}
	if r != t.rank && t.peers[r] == nil {
		return fmt.Errorf("shm: rank %d: %s rank %d: not a peer of this transport (Options.Peers)", t.rank, op, r)
	}
	return nil
}

// Send copies p into the ring to rank to under tag. It returns once the
// whole message is in the ring (p may then be reused), without waiting for
// the matching Recv; it waits only for ring space, which the peer's
// progress goroutine frees continually. If ctx ends while a message is
// half written, the link to the peer is broken.
func (t *Transport) Send(ctx context.Context, to int, tag transport.Tag, p []byte) error {
	if err := t.check("send to", to); err != nil {
		return err
	}
	if t.closed.Load() {
		return fmt.Errorf("shm: rank %d: send to rank %d (%v): %w", t.rank, to, tag, transport.ErrClosed)
	}
	if to == t.rank {
		t.self.Begin(tag, len(p)).Deliver(p)
		return nil
	}
	if err := t.peers[to].send(ctx, tag, p); err != nil {
		return fmt.Errorf("shm: rank %d: send to rank %d (%v): %w", t.rank, to, tag, err)
	}
	return nil
}

// Recv receives the next message from rank from under tag into p; see
// transport.Transport. A Recv cancelled by ctx consumes no message.
func (t *Transport) Recv(ctx context.Context, from int, tag transport.Tag, p []byte) error {
	if err := t.check("recv from", from); err != nil {
		return err
	}
	if t.closed.Load() {
		return fmt.Errorf("shm: rank %d: recv from rank %d (%v): %w", t.rank, from, tag, transport.ErrClosed)
	}
	var err error
	if from == t.rank {
		err = t.self.Recv(ctx, tag, p)
	} else {
		var q *demux.Pending
		q, err = t.peers[from].box.Post(tag, p)
		if q != nil {
			t.pollFor(ctx, q)
			err = q.Wait(ctx)
		}
	}
	if err != nil {
		return fmt.Errorf("shm: rank %d: recv from rank %d (%v): %w", t.rank, from, tag, err)
	}
	return nil
}

// pollFor copies records out of the rings in the receiver's own
// goroutine, for up to Options.Spin, until q is done: a message that
// arrives meanwhile reaches its receiver without waking any thread.
// Senders do not ring the doorbell while a receiver polls, so on leaving
// it rings it itself if records arrived that nobody has taken.
func (t *Transport) pollFor(ctx context.Context, q *demux.Pending) {
	if t.opts.Spin <= 0 || !t.mapped.TryRLock() {
		return
	}
	defer t.mapped.RUnlock()
	if t.closed.Load() {
		return
	}
	polling := t.own.polling()
	atomic.AddUint32(polling, 1)
	spinUntil := time.Now().Add(t.opts.Spin)
	for i := 1; !q.Done(); i++ {
		if t.progress.TryLock() {
			t.serviceAll()
			t.progress.Unlock()
			if q.Done() {
				break
			}
		}
		if t.closed.Load() || ctx.Err() != nil || (i%8 == 0 && time.Now().After(spinUntil)) {
			break
		}
		yield(i)
	}
	if atomic.AddUint32(polling, ^uint32(0)) == 0 && atomic.LoadUint32(t.own.sleeping()) != 0 && t.unread() {
		t.wake()
	}
}

// yield is one pause of a spin: a Go-level yield, and every fourth time an
// OS-level one (sched_yield), so that on a host whose cores are all busy a
// spinning rank does not keep the peer it waits for off the CPU. Measured
// on a loaded 2-core host, a spin without OS-level yields was bimodal
// (1 µs or 30–200 µs per 4 KiB round trip); with them it stays near 10 µs.
func yield(i int) {
	if i%4 == 0 {
		unix.Syscall(unix.SYS_SCHED_YIELD, 0, 0, 0)
		return
	}
	runtime.Gosched()
}

// serviceAll services every inbound ring. Caller holds t.progress.
func (t *Transport) serviceAll() bool {
	progress := false
	for _, p := range t.peers {
		if p != nil && p.service() {
			progress = true
		}
	}
	return progress
}

// unread reports whether some ring holds bytes not yet released, from the
// shared counters alone (no lock).
func (t *Transport) unread() bool {
	for _, p := range t.peers {
		if p != nil && atomic.LoadUint64(p.in.head) != atomic.LoadUint64(p.in.tail) {
			return true
		}
	}
	return false
}

// send writes one record: header, payload, padding.
func (p *peer) send(ctx context.Context, tag transport.Tag, msg []byte) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.t.closed.Load() {
		return transport.ErrClosed
	}
	if pe := p.sendErr.Load(); pe != nil {
		return pe
	}
	r := &p.out
	capacity := uint64(len(r.data))
	n := uint64(len(msg))
	pad := (recordAlign - n%recordAlign) % recordAlign
	head := p.outHead
	if err := p.waitSpace(ctx, head, recordAlign, false); err != nil {
		return err
	}
	h := wire.Header{Kind: wire.KindData, Group: tag.Group, Step: tag.Step, Seq: tag.Seq, Aux: n}
	h.Put(r.data[head&r.mask:])
	head += recordAlign
	published := head - recordAlign
	for off := uint64(0); off < n; {
		free := capacity - (head - atomic.LoadUint64(r.tail))
		if free == 0 {
			p.publish(head)
			published = head
			if err := p.waitSpace(ctx, head, 1, true); err != nil {
				return err
			}
			continue
		}
		k := min(free, n-off, publishBytes)
		at := head & r.mask
		c := copy(r.data[at:], msg[off:off+k])
		copy(r.data, msg[off+uint64(c):off+k])
		head += k
		off += k
		if off < n && head-published >= publishBytes {
			p.publish(head)
			published = head
		}
	}
	if pad > 0 {
		if capacity-(head-atomic.LoadUint64(r.tail)) < pad {
			// The receiver waits for the padding only after the payload.
			p.publish(head)
			if err := p.waitSpace(ctx, head, pad, true); err != nil {
				return err
			}
		}
		head += pad
	}
	p.publish(head)
	p.outHead = head
	return nil
}

// publish makes the ring's bytes up to head visible and rings the peer's
// doorbell if its poller sleeps.
func (p *peer) publish(head uint64) {
	atomic.StoreUint64(p.out.head, head)
	if atomic.LoadUint32(p.peerSleeping) != 0 && atomic.LoadUint32(p.peerPolling) == 0 {
		atomic.AddUint32(p.peerDoorbell, 1)
		futexWakeAll(p.peerDoorbell)
	}
}

// waitSpace waits until need bytes are free after head. started says the
// record is partly published: giving up then breaks the link.
func (p *peer) waitSpace(ctx context.Context, head, need uint64, started bool) error {
	r := &p.out
	capacity := uint64(len(r.data))
	free := func() uint64 { return capacity - (head - atomic.LoadUint64(r.tail)) }
	if free() >= need {
		return nil
	}
	spinUntil := time.Now().Add(p.t.opts.Spin)
	for i := 0; ; i++ {
		if free() >= need {
			return nil
		}
		if p.t.closed.Load() {
			return transport.ErrClosed
		}
		if pe := p.sendErr.Load(); pe != nil {
			return pe
		}
		if err := ctx.Err(); err != nil {
			if started {
				p.breakLink(errCancelledMid)
			}
			return err
		}
		if i%16 != 0 || time.Now().Before(spinUntil) {
			yield(i)
			continue
		}
		atomic.StoreUint32(r.waiting, 1)
		v := atomic.LoadUint32(r.space)
		if free() >= need {
			return nil
		}
		futexSleep(r.space, v, sleepMax)
	}
}

// breakLink marks the outbound side down and tells the peer, whose poller
// would otherwise wait for the rest of a half-written message.
func (p *peer) breakLink(cause error) {
	if !p.sendErr.CompareAndSwap(nil, &transport.PeerError{Peer: p.rank, Err: cause}) {
		return
	}
	p.writeFrame(wire.KindCancel)
}

func (p *peer) writeFrame(kind wire.Kind) error {
	p.wmu.Lock()
	defer p.wmu.Unlock()
	p.conn.SetWriteDeadline(time.Now().Add(time.Second))
	return wire.WriteFrame(p.conn, wire.Header{Kind: kind}, nil)
}

// poll is the progress goroutine: it copies records out of the inbound
// rings into the boxes whenever no receiver is doing it, and sleeps on
// the doorbell when they are empty. It does not spin: receivers that want
// low latency poll themselves (see pollFor), and a spinning thread per
// rank would starve them on a host with fewer cores than busy ranks.
func (t *Transport) poll() {
	defer close(t.pollerDone)
	doorbell, sleeping := t.own.doorbell(), t.own.sleeping()
	for {
		if t.closed.Load() {
			return
		}
		progress, idle := false, true
		if t.progress.TryLock() {
			progress = t.serviceAll()
			idle = !progress && t.idle()
			t.progress.Unlock()
		}
		if progress {
			// Let a receiver just readied run on this P at once.
			runtime.Gosched()
			continue
		}
		v := atomic.LoadUint32(doorbell)
		atomic.StoreUint32(sleeping, 1)
		if !idle || t.closed.Load() || t.unread() || t.gonePending() {
			atomic.StoreUint32(sleeping, 0)
			runtime.Gosched()
			continue
		}
		futexSleep(doorbell, v, sleepMax)
		atomic.StoreUint32(sleeping, 0)
	}
}

// idle reports whether no ring has unread bytes and no peer awaits
// settling. Caller holds t.progress.
func (t *Transport) idle() bool {
	for _, p := range t.peers {
		if p == nil || p.settled {
			continue
		}
		if atomic.LoadUint64(p.in.head) != p.inTail || p.gone.Load() != nil {
			return false
		}
	}
	return true
}

// gonePending reports whether a peer has gone but not been settled; it
// reads settled without t.progress, so it may err towards true.
func (t *Transport) gonePending() bool {
	for _, p := range t.peers {
		if p != nil && p.gone.Load() != nil && !p.settledFlag.Load() {
			return true
		}
	}
	return false
}

// wake rouses this rank's poller.
func (t *Transport) wake() {
	atomic.AddUint32(t.own.doorbell(), 1)
	futexWakeAll(t.own.doorbell())
}

// service copies what the peer has published into its box and reports
// whether it made progress. Caller holds t.progress.
func (p *peer) service() bool {
	if p.settled {
		return false
	}
	gone := p.gone.Load() // before head: everything sent before the goodbye is then visible
	head := atomic.LoadUint64(p.in.head)
	tail := p.inTail
	if head == tail {
		if gone != nil {
			p.settle(*gone)
		}
		return false
	}
	r := &p.in
	for tail < head {
		if p.cur == nil {
			if head-tail < recordAlign {
				p.settle(fmt.Errorf("protocol error: %d bytes published inside a record header", head-tail))
				return true
			}
			at := tail & r.mask
			h, err := wire.DecodeHeader(r.data[at:at+recordAlign], 0)
			if err == nil && h.Kind != wire.KindData {
				err = fmt.Errorf("unexpected %v record", h.Kind)
			}
			if err == nil && h.Aux > uint64(p.t.opts.MaxMessageBytes) {
				err = &wire.LengthError{What: "message", Length: h.Aux, Limit: uint64(p.t.opts.MaxMessageBytes)}
			}
			if err != nil {
				p.settle(fmt.Errorf("protocol error: %w", err))
				return true
			}
			tail += recordAlign
			p.cur = p.box.Begin(transport.Tag{Group: h.Group, Seq: h.Seq, Step: h.Step}, int(h.Aux))
			p.curRem = h.Aux
			p.curPad = (recordAlign - h.Aux%recordAlign) % recordAlign
		}
		for p.curRem > 0 && tail < head {
			k := min(p.curRem, head-tail, publishBytes)
			at := tail & r.mask
			first := min(k, uint64(len(r.data))-at)
			var got uint64
			_, _ = p.cur.Write(func(dst []byte) (int, error) {
				c := copy(dst, r.data[at:at+first])
				if c == int(first) && uint64(c) < k {
					c += copy(dst[c:], r.data[:k-first])
				}
				got = uint64(c)
				return c, nil
			})
			tail += got
			p.curRem -= got
			if p.curRem > 0 {
				p.release(tail) // let the sender refill while this copies on
			}
		}
		if p.curRem > 0 {
			break
		}
		if head-tail < p.curPad {
			break // the padding is published with the record's last bytes; not yet
		}
		tail += p.curPad
		p.cur.Done()
		p.cur = nil
	}
	p.release(tail)
	return true
}

// release hands the ring's bytes before tail back to the sender, waking
// it if it waits for space. Caller holds t.progress.
func (p *peer) release(tail uint64) {
	r := &p.in
	p.inTail = tail
	atomic.StoreUint64(r.tail, tail)
	if atomic.LoadUint32(r.waiting) != 0 {
		atomic.StoreUint32(r.waiting, 0)
		atomic.AddUint32(r.space, 1)
		futexWakeAll(r.space)
	}
}

// settle fails the peer's box once nothing more can come from it. Caller
// holds t.progress.
func (p *peer) settle(cause error) {
	p.settled = true
	p.settledFlag.Store(true)
	if p.gone.Load() == nil {
		// This end gives up on a live peer (a protocol error): tell it
		// why, so its sends fail instead of waiting for ring space.
		p.wmu.Lock()
		p.conn.SetWriteDeadline(time.Now().Add(time.Second))
		reason := fmt.Sprintf("rank %d dropped the link: %v", p.t.rank, cause)
		_ = wire.WriteFrame(p.conn, wire.Header{Kind: wire.KindRefuse}, []byte(reason[:min(len(reason), wire.MaxReasonBytes)]))
		p.wmu.Unlock()
	}
	pe := &transport.PeerError{Peer: p.rank, Err: cause}
	if p.cur != nil {
		p.cur.Abort(pe)
		p.cur = nil
	}
	p.box.Fail(pe)
	p.sendErr.CompareAndSwap(nil, pe)
	if cause != errPeerClosed && !p.t.closed.Load() {
		p.t.opts.Logger.Warn("shm: link down", "rank", p.t.rank, "peer", p.rank, "err", cause)
	}
}

// markGone records why the peer can send no more and rouses whoever
// waits on it.
func (p *peer) markGone(cause error) {
	p.gone.CompareAndSwap(nil, &cause)
	p.sendErr.CompareAndSwap(nil, &transport.PeerError{Peer: p.rank, Err: cause})
	p.t.wake()
	futexWakeAll(p.out.space)
}

// readLoop watches the liveness channel: a goodbye, a cancelled send, or
// the connection's end.
func (p *peer) readLoop() {
	defer close(p.readerDone)
	for {
		h, payload, err := wire.ReadFrame(p.conn, wire.MaxReasonBytes)
		if err != nil {
			if !p.t.closed.Load() {
				p.markGone(errPeerVanished)
			}
			return
		}
		switch h.Kind {
		case wire.KindClose:
			p.markGone(errPeerClosed)
		case wire.KindCancel:
			p.markGone(errCancelledMid)
		case wire.KindRefuse:
			p.markGone(errors.New(string(payload)))
		default:
			p.markGone(fmt.Errorf("protocol error: unexpected %v frame", h.Kind))
		}
	}
}

// Close fails pending calls with transport.ErrClosed, says goodbye to
// every peer and releases the mappings. Messages already in peers' rings
// stay receivable by them. Close is idempotent.
func (t *Transport) Close() error {
	t.shutdown(true)
	return nil
}

// kill stops this rank without goodbyes, as the crash of its process would;
// for tests.
func (t *Transport) kill() { t.shutdown(false) }

func (t *Transport) shutdown(goodbye bool) {
	t.closeOnce.Do(func() {
		t.closed.Store(true)
		t.self.Close(transport.ErrClosed)
		for _, p := range t.peers {
			if p != nil {
				p.box.Close(transport.ErrClosed)
			}
		}
		// Stop the poller and the senders; no goroutine touches the
		// mappings after this.
		t.wake()
		for _, p := range t.peers {
			if p != nil {
				futexWakeAll(p.out.space)
			}
		}
		<-t.pollerDone
		for _, p := range t.peers {
			if p == nil {
				continue
			}
			p.mu.Lock() // waits for a sender to notice the close
			if goodbye && p.sendErr.Load() == nil {
				p.writeFrame(wire.KindClose)
			}
			p.sendErr.CompareAndSwap(nil, &transport.PeerError{Peer: p.rank, Err: errLocalClose})
			p.mu.Unlock()
			p.conn.Close()
		}
		for _, p := range t.peers {
			if p != nil {
				<-p.readerDone
			}
		}
		t.mapped.Lock() // no receiver polls any more; never unlocked
		t.progress.Lock()
		for _, p := range t.peers {
			if p != nil {
				p.seg.unmap()
			}
		}
		t.own.unlink()
		t.own.unmap()
	})
}
