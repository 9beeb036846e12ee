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

	"github.com/cohortml/cohort/distributed/transport"
	"github.com/cohortml/cohort/distributed/transport/internal/demux"
	"github.com/cohortml/cohort/distributed/wire"
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
	own        *segment // this rank's segment: its inbound rings
	bell       *bell    // what the progress goroutine sleeps on; nil: the doorbell futex
	probe      *uint64  // read by peers to test single copy
	pid        int
	peers      []*peer    // by rank; nil at this rank and at ranks that are not peers
	self       *demux.Box // messages to itself
	closed     atomic.Bool
	closeOnce  sync.Once
	pollerDone chan struct{}
	epoch      time.Time // mono's zero
	gate       yieldGate // whether waiters may yield the CPU (Options.yield)
	wakes      wakeEstimate
	waiting    atomic.Pointer[waitState] // how waiters wait (wait.go); set before use
	// mapped is read-held by receivers while they touch the mappings;
	// Close write-locks it for good before unmapping.
	mapped sync.RWMutex
}

var _ transport.Transport = (*Transport)(nil)
var _ transport.Folder = (*Transport)(nil)

// peer is everything about one other rank.
type peer struct {
	t    *Transport
	rank int

	// Outbound: this rank produces into its slot of the peer's segment.
	seg          *segment
	out          ring
	peerDoorbell *uint32
	peerSleeping *uint32
	peerBell     int        // the peer's doorbell FIFO, or −1 where it sleeps on peerDoorbell
	mu           sync.Mutex // one sender at a time; guards outHead
	outHead      uint64
	sendErr      atomic.Pointer[transport.PeerError] // outbound side down

	// Inbound: the peer's slot of this rank's segment, consumed by
	// whoever holds inMu: the progress goroutine, or a receiver taking
	// its own message straight out of the ring (recvDirect).
	in          ring
	box         *demux.Box
	inMu        sync.Mutex
	inBusy      atomic.Int32 // a direct receiver holds inMu (and answers for the ring)
	inTail      uint64       // guarded by inMu
	cur         *demux.Msg   // message being copied out into the box; guarded by inMu
	curRem      uint64       // its payload bytes still to copy
	curPad      uint64       // its padding after the payload
	gone        atomic.Pointer[error]
	settled     bool        // the box has been failed after gone; guarded by inMu
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

func (t *Transport) check(op string, r int, tag transport.Tag) error {
	return transport.Check("shm", t.rank, op, r, tag, t.peers, t.closed.Load())
}

// Send copies p into the ring to rank to under tag. It returns once the
// whole message is in the ring (p may then be reused), without waiting for
// the matching Recv; it waits only for ring space, which the peer's
// progress goroutine frees continually. If ctx ends while a message is
// half written, the link to the peer is broken.
func (t *Transport) Send(ctx context.Context, to int, tag transport.Tag, p []byte) error {
	return t.sendTo(ctx, to, tag, p, true)
}

// SendEager is Send that never offers the message by single copy: it goes
// through the ring whatever its length, so that the Send completes without
// the receiver (see transport.EagerSender).
func (t *Transport) SendEager(ctx context.Context, to int, tag transport.Tag, p []byte) error {
	return t.sendTo(ctx, to, tag, p, false)
}

func (t *Transport) sendTo(ctx context.Context, to int, tag transport.Tag, p []byte, single bool) error {
	if err := t.check("send to", to, tag); err != nil {
		return err
	}
	if to == t.rank {
		t.self.Begin(tag, len(p)).Deliver(p)
		return nil
	}
	if err := t.peers[to].send(ctx, tag, p, single); err != nil {
		return fmt.Errorf("shm: rank %d: send to rank %d (%v): %w", t.rank, to, tag, err)
	}
	return nil
}

// Recv receives the next message from rank from under tag into p; see
// transport.Transport. A Recv cancelled by ctx consumes no message.
//
// The receiver first looks for its message itself (recvDirect): it waits
// on the ring's head word, spinning for Options.Spin and then sleeping on
// the ring's futex, and copies its message straight out of the ring into
// p. Only when a message for the tag is already queued, or none comes for
// a while, does it post the receive and leave the delivery to the progress
// goroutine.
func (t *Transport) Recv(ctx context.Context, from int, tag transport.Tag, p []byte) error {
	return t.recv(ctx, from, tag, p, sink{})
}

// RecvFold receives the next message from rank from under tag, folding
// its pieces as they arrive; see transport.Folder. A message taken
// straight out of the ring (see Recv) is folded piece by piece from the
// ring as its bytes are published; one delivered through the box or by
// single copy, or in units over maxFoldUnit bytes, arrives in scratch
// first and is folded whole.
func (t *Transport) RecvFold(ctx context.Context, from int, tag transport.Tag, scratch []byte, unit int, fold func(off int, q []byte)) error {
	if unit < 1 || len(scratch)%unit != 0 {
		return fmt.Errorf("shm: rank %d: recv from rank %d (%v): %d bytes are not a whole number of %d-byte units", t.rank, from, tag, len(scratch), unit)
	}
	return t.recv(ctx, from, tag, scratch, sink{unit: unit, fold: fold})
}

// sink is where a receive puts its message: into the buffer it is given,
// or, with fold set, through fold (see Transport.RecvFold).
type sink struct {
	unit int
	fold func(off int, q []byte)
}

// maxFoldUnit bounds the unit of a piece folded out of the ring: a unit
// split by the ring's end is put together in a buffer of this size.
const maxFoldUnit = 16

func (t *Transport) recv(ctx context.Context, from int, tag transport.Tag, p []byte, sk sink) error {
	if err := t.check("recv from", from, tag); err != nil {
		return err
	}
	var err error
	folded := false // the message went through sk.fold
	if from == t.rank {
		err = t.self.Recv(ctx, tag, p)
	} else {
		pr := t.peers[from]
		var done bool
		if tag.Seq != noticeSeq {
			direct := sk
			if sk.unit > maxFoldUnit {
				direct = sink{} // foldRing could not put a unit split by the ring's end together
			}
			done, err = pr.recvDirect(ctx, tag, p, direct)
			folded = done && direct.fold != nil
		}
		if !done {
			err = pr.recvBox(ctx, tag, p)
		}
	}
	if err != nil {
		return fmt.Errorf("shm: rank %d: recv from rank %d (%v): %w", t.rank, from, tag, err)
	}
	if sk.fold != nil && !folded {
		sk.fold(0, p)
	}
	return nil
}

// noticeSeq is the Seq of the process group's abort notices, whose
// receives stay posted for the group's lifetime: they wait in the box
// rather than in the ring, where they would take every data record they
// meet out of their receivers' way (into the box: an allocation and a
// copy more per message).
const noticeSeq = ^uint64(0)

// recvBox receives through the box: the progress goroutine, woken by
// the senders of messages under tag (see publish), delivers.
func (p *peer) recvBox(ctx context.Context, tag transport.Tag, buf []byte) error {
	q, err := p.box.Post(tag, buf)
	if q == nil {
		return err
	}
	if !p.t.mapped.TryRLock() {
		return q.Wait(ctx) // closing: the box fails the receive
	}
	// Held across the wait, which Close ends by closing the box before
	// it unmaps.
	defer p.t.mapped.RUnlock()
	want := &p.in.want[wantBucket(tag)]
	atomic.AddUint32(want, 1)
	if atomic.LoadUint32(p.t.own.sleeping()) != 0 && atomic.LoadUint64(p.in.head) != atomic.LoadUint64(p.in.tail) {
		p.t.wake() // the message may have come before the count went up
	}
	err = q.Wait(ctx)
	atomic.AddUint32(want, ^uint32(0))
	return err
}

// wantBucket is the want counter of a tag.
func wantBucket(tag transport.Tag) uint32 {
	h := uint64(tag.Group)*0x9e3779b97f4a7c15 ^ tag.Seq*0xc2b2ae3d27d4eb4f ^ uint64(tag.Step)*0x165667b19e3779f9
	return uint32(h>>32) % wantBuckets
}

// Waiting in recvDirect and waitSpace.
const (
	// spinCheck is how many polls of a spin pass between looks at the
	// clock, ctx and the link's state.
	spinCheck = 64
	// spinGosched is how many polls pass between yields to the Go
	// scheduler (see pause): some 50 to 100 µs of polling, so that a short
	// wait never yields. A yield costs 0.1 to 0.4 µs, and with one P it
	// runs whatever else is runnable first (a group's op goroutine, kicked
	// when the op was queued): yielding every 16 polls, as once, spent
	// most of a short wait in the scheduler (world 2, 4 KiB all-reduce 4.2
	// against 3.6 µs, 64 KiB 21 against 18 µs, without yields), and every
	// 2,048 polls still cost the 4 KiB all-reduce up to 0.8 µs. Never
	// yielding starves this process's other goroutines on the poller's P
	// for the whole spin: with one P and a spin of milliseconds (dist's,
	// when the ranks' threads fit the CPUs), a 2 MiB broadcast, whose link
	// goroutines take turns on that P, took 12 ms instead of 0.24.
	spinGosched = 16384
	// directSleep bounds one futex sleep of a receiver waiting on its
	// ring, so that ctx is looked at regularly; directWait bounds the
	// whole wait before the receive is handed to the progress goroutine
	// (a receive that waits long, such as one for an abort notice, should
	// not hold a thread and make every sender ring the ring's futex).
	directSleep = 2 * time.Millisecond
	// drainAfter is how long a sender waiting for ring space lets the
	// ring's tail stand still before it has the peer's progress goroutine
	// drain the ring into the boxes. Draining sooner would move records a
	// receiver is about to take, copying them once more into fresh heap
	// memory, whenever the receiver is merely a segment behind.
	drainAfter = 2 * time.Millisecond
	directWait = 20 * time.Millisecond
)

// recordState is what the next record of a ring means to a direct
// receiver.
type recordState uint8

const (
	recordNone  recordState = iota // nothing published yet
	recordMine                     // the message the receiver waits for
	recordOther                    // another message (or a broken record): service it into the box
	recordBox                      // the box must deliver: it holds something for the tag, or the link is down
)

// pause is the pause between two polls of a spinning waiter. While the
// ranks fit the CPUs it is now and then a yield to the Go scheduler (0.1
// µs when nothing else is runnable), so that the process's other
// goroutines still run on a busy P. With more ranks than CPUs it is such
// a yield at every poll and then, while the yield gate is open, a yield
// of the CPU (sched_yield), timed for the gate (see yield.go).
//
// Only a waiter for a small message (below bigWait) reports a slow yield
// to the gate: while long messages move, the peers legitimately hold
// their CPUs for whole time slices copying them, which says nothing about
// outside load, and closing the gate then would leave the small
// operations after a large one sleeping on the futex for seconds.
func (t *Transport) pause(i int, n uint64) {
	if !t.opts.yield || !t.plan().Yield {
		if i%spinGosched == spinGosched-1 { // callers pause between checks, never at i%spinCheck == 0
			runtime.Gosched()
		}
		return
	}
	runtime.Gosched()
	start := t.mono()
	if !t.gate.open(start) {
		return
	}
	schedYield()
	end := t.mono()
	t.gate.observeWait(end, time.Duration(end-start), n)
}

// polling reports whether a waiter that started polling so as to stop at
// spinUntil goes on polling at now, rather than sleeping: not for an
// operation nobody waits for yet (transport.Awaited: it runs ahead of its
// caller, whose computation, or another rank's, needs the CPU more), and
// not while the yield gate is closed, when polling would hold a CPU a
// peer needs.
func (t *Transport) polling(ctx context.Context, now, spinUntil time.Time) bool {
	return now.Before(spinUntil) && (!t.opts.yield || t.gate.open(t.mono())) && transport.Awaited(ctx)
}

// mono is the yield gate's clock: monotonic nanoseconds.
func (t *Transport) mono() int64 { return int64(time.Since(t.epoch)) }

// recvDirect receives the message under tag into buf straight out of the
// ring, on the caller's goroutine: no hand-off to another goroutine, no
// allocation. It reports done false, having consumed nothing for the
// tag, when the receive must go through the box instead: the box already
// holds a message or a receiver for the tag, the message has another
// length (the box reports the length error), the link is down, or nothing
// came within Options.Spin plus directWait. Records for other tags met on
// the way are serviced into the box.
func (p *peer) recvDirect(ctx context.Context, tag transport.Tag, buf []byte, sk sink) (done bool, err error) {
	t := p.t
	if !t.mapped.TryRLock() {
		return false, nil
	}
	defer t.mapped.RUnlock()
	r := &p.in
	var spinUntil, waitUntil time.Time
	raw := t.plan().RawSleep // what this wait may still sleep holding its P
	// looked: at head last, this receiver held the ring and found nothing
	// for it. Only then may it sleep until head moves: a look that failed
	// to take the ring (the progress goroutine held it, and may have
	// queued this receiver's message in the box) must be repeated.
	looked := false
	last := atomic.LoadUint64(r.head) + 1 // differs from head: look at once
	for i := 1; ; i++ {
		if head := atomic.LoadUint64(r.head); head != last || i%spinCheck == 0 {
			last, looked = head, false
			if p.inMu.TryLock() {
				st, h := p.next(tag, len(buf))
				switch st {
				case recordMine:
					p.inBusy.Add(1)
					err := p.consume(ctx, tag, h, buf, sk)
					p.inBusy.Add(-1)
					need := p.needsService()
					p.inMu.Unlock()
					if need {
						p.handOff()
					}
					return true, err
				case recordOther:
					p.service()
					p.inMu.Unlock()
					last = head + 1 // look again at once
					continue
				case recordBox:
					p.inMu.Unlock()
					return false, nil
				}
				p.inMu.Unlock()
				looked = true
			}
		}
		if i%spinCheck != 0 {
			p.t.pause(i, uint64(len(buf)))
			continue
		}
		if t.closed.Load() || ctx.Err() != nil || p.gone.Load() != nil {
			return false, nil // the box path reports it
		}
		now := time.Now()
		if spinUntil.IsZero() {
			spinUntil = now.Add(t.spin())
			waitUntil = spinUntil.Add(directWait)
		}
		if now.After(waitUntil) {
			return false, nil
		}
		if t.polling(ctx, now, spinUntil) || !looked {
			continue
		}
		p.sleepOnRing(last+1, directSleep, &raw) // until anything more is published
		last++                                   // look again at once
	}
}

// sleepOnRing sleeps on the ring's futex, at most d, until the ring's
// head reaches wakeAt: one past the head a receiver waiting for anything
// saw, or the end of the record (or half a ring on) for a receiver in the
// middle of a long message, so that it is not woken by each piece the
// sender publishes (on a VM a wake-up costs tens of microseconds, a
// 64 KiB piece a few). Senders wake it (see publish); so do Close and a
// dead peer.
//
// While *raw, the wait's allowance, lasts, it sleeps through a raw system
// call, which the Go runtime does not see, for at most *raw, and takes
// what it slept off *raw: the thread keeps its P, so that nothing else of
// this process runs meanwhile, but the runtime neither hands the P to
// another thread when the sleep outlasts a sysmon tick nor, having done
// so, sets sysmon polling every 20 µs again (each of those timer wake-ups
// cost tens of microseconds of CPU on a KVM guest; see wait.go).
func (p *peer) sleepOnRing(wakeAt uint64, d time.Duration, raw *time.Duration) {
	r := &p.in
	// Set the threshold and arm the bell before reading it: a sender that
	// publishes after the check below finds it armed and rings once its
	// head reaches the threshold; one that rang before makes the futex
	// word differ from v.
	atomic.StoreUint64(r.wakeAt, wakeAt)
	atomic.StoreUint32(r.sleepers, 1)
	v := atomic.LoadUint32(r.bell)
	if atomic.LoadUint64(r.head) < wakeAt && !p.t.closed.Load() && p.gone.Load() == nil {
		slept := monoNow()
		var woken bool
		if *raw > 0 {
			woken = futexSleepRaw(r.bell, v, min(d, *raw))
			*raw -= time.Duration(monoNow() - slept)
		} else {
			woken = futexSleep(r.bell, v, d)
		}
		if woken {
			p.t.woke(r.rangAt, slept)
		}
	}
}

// handOff wakes the progress goroutine, after a direct receiver held the
// ring and found that the records behind its message need the progress
// goroutine (needsService: a receiver waits in the box for one of them,
// or the sender for space): their senders' wake-up found the ring held
// and the progress goroutine asleep again. Records nobody waits for in
// the box stay in the ring for their direct receivers; waking the
// progress goroutine for them would only cost its rank a context switch
// and, with one P, the time until the runtime takes the P back from its
// futex sleep.
func (p *peer) handOff() {
	if atomic.LoadUint32(p.t.own.sleeping()) != 0 {
		p.t.wake()
	}
}

// next classifies the ring's next record for a direct receive of n bytes
// under tag, returning its header when it is the receiver's. Caller holds
// inMu.
func (p *peer) next(tag transport.Tag, n int) (recordState, wire.Header) {
	if p.settled || p.cur != nil || !p.box.Quiet(tag) {
		return recordBox, wire.Header{}
	}
	r := &p.in
	head := atomic.LoadUint64(r.head)
	if head-p.inTail < recordAlign {
		if head != p.inTail {
			return recordOther, wire.Header{} // service() reports the broken record
		}
		if p.gone.Load() != nil {
			return recordBox, wire.Header{}
		}
		return recordNone, wire.Header{}
	}
	at := p.inTail & r.mask
	h, err := wire.DecodeHeader(r.data[at:at+recordAlign], descBytes)
	if err != nil || h.Kind != wire.KindData || (h.Length != 0 && (h.Length != descBytes || head-p.inTail < recordAlign+descBytes)) || h.Aux != uint64(n) ||
		h.Group != tag.Group || h.Seq != tag.Seq || h.Step != tag.Step {
		return recordOther, wire.Header{}
	}
	return recordMine, h
}

// consume copies the record at the ring's tail, whose header is h, into
// buf (len(buf) == h.Aux) as its bytes are published, and releases it.
// If ctx ends, the link breaks or the transport closes first, what was
// copied becomes a message queued in the box, completed later by the
// progress goroutine, and the receive fails: nothing is consumed. Caller
// holds inMu.
func (p *peer) consume(ctx context.Context, tag transport.Tag, h wire.Header, buf []byte, sk sink) error {
	r := &p.in
	n := h.Aux
	pad := (recordAlign - n%recordAlign) % recordAlign
	tail := p.inTail + recordAlign
	if h.Length == descBytes {
		if p.claim(p.inTail, buf) {
			p.release(tail + descBytes)
			if sk.fold != nil {
				sk.fold(0, buf)
			}
			return nil
		}
		tail += descBytes // inline: the payload follows the descriptor
	}
	var got uint64
	var spinUntil time.Time
	raw := p.t.plan().RawSleep
	for i := 1; ; i++ {
		head := atomic.LoadUint64(r.head)
		for got < n && tail < head {
			k := min(n-got, head-tail, publishBytes)
			at := tail & r.mask
			if sk.fold != nil {
				if got+k < n {
					k -= k % uint64(sk.unit) // whole units only
					if k == 0 {
						break // wait for the rest of the unit
					}
				}
				p.foldRing(sk, got, at, k)
			} else {
				c := uint64(copy(buf[got:got+k], r.data[at:]))
				copy(buf[got+c:got+k], r.data)
			}
			got += k
			tail += k
			if got < n {
				p.release(tail) // let the sender refill while this copies on
			}
		}
		if got == n && head-tail >= pad {
			p.release(tail + pad)
			return nil
		}
		if i%spinCheck != 0 {
			p.t.pause(i, uint64(len(buf)))
			continue
		}
		err := ctx.Err()
		if gone := p.gone.Load(); err == nil && gone != nil {
			if atomic.LoadUint64(r.head) != head {
				continue // sent before the goodbye: copy it first
			}
			err = &transport.PeerError{Peer: p.rank, Err: *gone}
		}
		if err == nil && p.t.closed.Load() {
			err = transport.ErrClosed
		}
		if err != nil {
			// Give the part back: the box completes the message later
			// (or fails it) and hands it to the next receive for the tag.
			// A part already folded cannot be given back: the message is
			// dropped, its rest discarded as it comes.
			m := p.box.Begin(tag, int(n))
			if sk.fold != nil && got > 0 {
				m.Abort(err)
			} else {
				for off := uint64(0); off < got; {
					k, _ := m.Write(func(dst []byte) (int, error) { return copy(dst, buf[off:got]), nil })
					off += uint64(k)
				}
			}
			p.cur, p.curRem, p.curPad = m, n-got, pad
			if got == n {
				p.curRem = 0
			}
			p.release(tail)
			return err
		}
		now := time.Now()
		if spinUntil.IsZero() {
			spinUntil = now.Add(p.t.spin())
		}
		if !p.t.polling(ctx, now, spinUntil) {
			// Wake at the record's end, or once half a ring is there:
			// with the ring released up to tail the sender can always
			// publish that much, so it never waits for this receiver.
			if p.inTail != tail {
				p.release(tail) // the payload is in; only the padding is missing
			}
			p.sleepOnRing(tail+min(n-got+pad, uint64(len(r.data))/2), directSleep, &raw)
		}
	}
}

// foldRing folds the k bytes at ring offset at, the message's bytes from
// got on, through sk.fold: in one piece, or two where the ring's end cuts
// them, with a unit the end splits put together in a buffer.
func (p *peer) foldRing(sk sink, got, at, k uint64) {
	data := p.in.data
	first := min(k, uint64(len(data))-at)
	if first == k {
		sk.fold(int(got), data[at:at+k])
		return
	}
	u := uint64(sk.unit)
	whole := first - first%u
	if whole > 0 {
		sk.fold(int(got), data[at:at+whole])
	}
	rest := data[:k-first]
	if split := first - whole; split > 0 {
		var unit [maxFoldUnit]byte
		copy(unit[:], data[at+whole:at+first])
		copy(unit[split:u], rest)
		sk.fold(int(got+whole), unit[:u])
		rest = rest[u-split:]
		whole += u
	}
	if len(rest) > 0 {
		sk.fold(int(got+whole), rest)
	}
}

// needed reports whether some ring needs the progress goroutine (see
// needsService), or may: a ring held by someone other than a direct
// receiver is looked at again.
func (t *Transport) needed() bool {
	for _, p := range t.peers {
		if p == nil {
			continue
		}
		if !p.inMu.TryLock() {
			if p.inBusy.Load() == 0 {
				return true
			}
			continue
		}
		need := p.needsService()
		p.inMu.Unlock()
		if need {
			return true
		}
	}
	return false
}

// scanRecords bounds how many records needsService looks through.
const scanRecords = 256

// needsService reports whether the progress goroutine must copy the
// peer's ring into the box: a receiver waits in the box for the tag of a
// record in the ring (the records before it must move out of its way),
// the sender waits for space, a message is half copied into the box, the
// ring holds something malformed, or the peer has gone. Otherwise the
// records wait in the ring for their receivers, who copy them straight
// into their buffers (recvDirect), with no allocation and one copy fewer,
// and take offers of single copy. Caller holds p.inMu.
func (p *peer) needsService() bool {
	if p.settled {
		return false
	}
	r := &p.in
	if p.cur != nil || p.gone.Load() != nil || atomic.LoadUint32(r.waiting) != 0 {
		return true
	}
	head := atomic.LoadUint64(r.head)
	pos := p.inTail
	for range scanRecords {
		if pos == head {
			return false
		}
		if head-pos < recordAlign {
			return true // service reports the broken record
		}
		at := pos & r.mask
		h, err := wire.DecodeHeader(r.data[at:at+recordAlign], descBytes)
		if err != nil || h.Kind != wire.KindData || (h.Length != 0 && h.Length != descBytes) {
			return true
		}
		if atomic.LoadUint32(&r.want[wantBucket(transport.Tag{Group: h.Group, Seq: h.Seq, Step: h.Step})]) != 0 {
			return true
		}
		pos += recordAlign
		if h.Length == descBytes {
			if head-pos < descBytes {
				return true
			}
			state, _, _ := p.descriptor(pos - recordAlign)
			if atomic.LoadUint32(state) != stInline {
				return false // offered: its extent is not known yet
			}
			pos += descBytes
		}
		pos += h.Aux + (recordAlign-h.Aux%recordAlign)%recordAlign
		if pos-p.inTail > head-p.inTail {
			return false // the record is still being written
		}
	}
	return true
}

// send writes one record: header, payload, padding; with single, a long
// message is offered by single copy first.
func (p *peer) send(ctx context.Context, tag transport.Tag, msg []byte, single bool) error {
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
	h := wire.Header{Kind: wire.KindData, Group: tag.Group, Step: tag.Step, Seq: tag.Seq, Aux: n}
	var published uint64
	if single && p.rendezvous(msg) {
		if err := p.waitSpace(ctx, head, recordAlign+descBytes, false); err != nil {
			return err
		}
		var done bool
		var err error
		if head, done, err = p.offer(ctx, tag, h, msg); err != nil {
			p.breakLink(err)
			return err
		}
		p.outHead = head
		if done {
			return nil
		}
		published = head // inline after all: the payload follows the descriptor
	} else {
		if err := p.waitSpace(ctx, head, recordAlign, false); err != nil {
			return err
		}
		h.Put(r.data[head&r.mask:])
		published = head
		head += recordAlign
	}
	for off := uint64(0); off < n; {
		free := capacity - (head - atomic.LoadUint64(r.tail))
		if free == 0 {
			p.publish(head, tag)
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
			p.publish(head, tag)
			published = head
		}
	}
	if pad > 0 {
		if capacity-(head-atomic.LoadUint64(r.tail)) < pad {
			// The receiver waits for the padding only after the payload.
			p.publish(head, tag)
			if err := p.waitSpace(ctx, head, pad, true); err != nil {
				return err
			}
		}
		head += pad
	}
	p.publish(head, tag)
	p.outHead = head
	return nil
}

// publish makes the ring's bytes up to head, where the record under tag
// ends or continues, visible, and wakes who sleeps waiting for them: a
// receiver sleeping on the ring, and the peer's progress goroutine if a
// receiver waits for it to deliver a message under tag (see recvBox).
// Other records wait in the ring for their receivers, who take them
// straight out of it (recvDirect); the progress goroutine is not woken for
// them.
func (p *peer) publish(head uint64, tag transport.Tag) {
	r := &p.out
	atomic.StoreUint64(r.head, head)
	// Ring once per sleep: the first publish after a receiver armed the
	// bell that reaches the receiver's threshold (wakeAt)
	// disarms it and wakes every sleeper; later ones, until someone sleeps
	// again, make no system call.
	if atomic.LoadUint32(r.sleepers) != 0 {
		if head >= atomic.LoadUint64(r.wakeAt) && atomic.SwapUint32(r.sleepers, 0) != 0 {
			atomic.StoreInt64(r.rangAt, monoNow()) // before the bell: see Transport.woke
			atomic.AddUint32(r.bell, 1)
			futexWakeAll(r.bell)
		}
	}
	if atomic.LoadUint32(&r.want[wantBucket(tag)]) != 0 {
		p.wakePeer()
	}
}

// wakePeer rings the peer's doorbell if its progress goroutine sleeps.
func (p *peer) wakePeer() {
	if atomic.LoadUint32(p.peerSleeping) != 0 {
		atomic.AddUint32(p.peerDoorbell, 1)
		if p.peerBell >= 0 {
			ringFIFO(p.peerBell)
		} else {
			futexWakeAll(p.peerDoorbell)
		}
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
	now := time.Now()
	spinUntil := now.Add(p.t.spin())
	// The ring's tail, and when it last moved: while it moves a receiver
	// is taking records out, and the sender only waits.
	lastTail, moved := atomic.LoadUint64(r.tail), now
	for i := 0; ; i++ {
		if free() >= need {
			return nil
		}
		if i%spinCheck != 0 {
			p.t.pause(i, bigWait) // the ring is full: long messages in flight
			continue
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
		now := time.Now()
		if p.t.polling(ctx, now, spinUntil) {
			continue
		}
		if tail := atomic.LoadUint64(r.tail); tail != lastTail {
			lastTail, moved = tail, now
		}
		atomic.StoreUint32(r.waiting, 1)
		v := atomic.LoadUint32(r.space)
		if free() >= need {
			return nil
		}
		if now.Sub(moved) < drainAfter {
			// A receiver is taking records out (it may be busy with the
			// last one for a while): wait for it to free space.
			if futexSleep(r.space, v, drainAfter) {
				p.t.woke(nil, 0)
			}
			continue
		}
		// No receiver has taken anything out for a while: have the
		// peer's progress goroutine drain the ring into its boxes (an
		// allocation and a copy more per message).
		p.wakePeer()
		if futexSleep(r.space, v, sleepMax) {
			p.t.woke(nil, 0)
		}
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
// the doorbell when they are empty. It does not spin: receivers wait for
// their own messages (see recvDirect), and a spinning thread per rank
// would starve them on a host with fewer cores than busy ranks.
func (t *Transport) poll() {
	defer close(t.pollerDone)
	doorbell, sleeping := t.own.doorbell(), t.own.sleeping()
	for {
		if t.closed.Load() {
			return
		}
		progress, idle := false, true
		for _, p := range t.peers {
			if p == nil {
				continue
			}
			if !p.inMu.TryLock() {
				// A direct receiver that holds the ring answers for it;
				// anyone else lets go soon.
				idle = idle && p.inBusy.Load() != 0
				continue
			}
			if p.needsService() {
				if p.service() {
					progress = true
				} else if !p.settled && (atomic.LoadUint64(p.in.head) != p.inTail || p.gone.Load() != nil) {
					idle = false
				}
			}
			p.inMu.Unlock()
		}
		if progress {
			// Let a receiver just readied run on this P at once.
			runtime.Gosched()
			continue
		}
		v := atomic.LoadUint32(doorbell)
		atomic.StoreUint32(sleeping, 1)
		if !idle || t.closed.Load() || t.needed() || t.gonePending() {
			atomic.StoreUint32(sleeping, 0)
			runtime.Gosched()
			continue
		}
		woken := false
		if t.bell == nil {
			woken = futexSleep(doorbell, v, sleepMax)
		} else if atomic.LoadUint32(doorbell) == v {
			woken = t.bell.sleep(sleepMax)
		}
		if woken {
			t.woke(nil, 0)
		}
		atomic.StoreUint32(sleeping, 0)
	}
}

// gonePending reports whether a peer has gone but not been settled; it
// reads settled without p.inMu, so it may err towards true.
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
	if t.bell != nil {
		ringFIFO(t.bell.w)
	} else {
		futexWakeAll(t.own.doorbell())
	}
}

// service copies what the peer has published into its box and reports
// whether it made progress. Caller holds p.inMu.
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
			h, err := wire.DecodeHeader(r.data[at:at+recordAlign], descBytes)
			if err == nil && h.Kind != wire.KindData {
				err = fmt.Errorf("unexpected %v record", h.Kind)
			}
			if err == nil && h.Length != 0 && (h.Length != descBytes || head-tail < recordAlign+descBytes) {
				err = fmt.Errorf("record header with length %d, %d bytes published", h.Length, head-tail)
			}
			if err == nil && h.Aux > uint64(p.t.opts.MaxMessageBytes) {
				err = &wire.LengthError{What: "message", Length: h.Aux, Limit: uint64(p.t.opts.MaxMessageBytes)}
			}
			if err != nil {
				p.settle(fmt.Errorf("protocol error: %w", err))
				return true
			}
			if h.Length == descBytes {
				// A single-copy offer: the box has no receiver's buffer
				// to read into, so the sender sends the payload inline.
				p.refuse(tail)
				tail += descBytes
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
// it if it waits for space. Caller holds p.inMu.
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
// holds p.inMu.
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
	p.wakeRing()
	futexWakeAll(p.out.space)
}

// wakeRing rouses receivers sleeping on the inbound ring.
func (p *peer) wakeRing() {
	atomic.AddUint32(p.in.bell, 1)
	futexWakeAll(p.in.bell)
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
				p.wakeRing()
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
		t.mapped.Lock() // no receiver touches the rings any more; never unlocked
		for _, p := range t.peers {
			if p != nil {
				p.inMu.Lock() // never unlocked
				p.seg.unmap()
			}
		}
		t.own.unlink()
		t.own.unmap()
		// Every sender has seen the close (under p.mu, above), so no one
		// rings any more.
		t.bell.close()
		for _, p := range t.peers {
			if p != nil && p.peerBell >= 0 {
				unix.Close(p.peerBell)
			}
		}
	})
}
