// Package demux matches the messages arriving from one peer to the
// receivers waiting for them, by tag. It is the receive half shared by the
// inproc, tcp and shm transports.
//
// A Box belongs to one (receiver, peer) pair. Its source (the goroutine that
// reads the peer's link) announces each message with Begin, fills it with
// Write and finishes it with Done or Abort. Receivers call Recv. When a
// receiver is already waiting for the tag, the payload is written straight
// into the receiver's buffer (no intermediate copy); otherwise the payload
// goes to a freshly allocated buffer that a later Recv copies from. A Recv
// that arrives while such a message is still being written takes the bytes
// written so far and has the rest written directly into its own buffer.
//
// Invariants:
//   - per tag, messages are handed to receivers in the order Begin saw them;
//   - a message is matched to at most one receiver at a time (Msg.w);
//   - a receiver whose Recv has returned is never written to again: a
//     cancelled receiver detaches under Msg.mu, after which Write targets a
//     private copy;
//   - a receiver whose buffer does not fit the message it meets fails with
//     a *transport.LengthError once the message's first
//     transport.LengthPrefixBytes bytes (or all of a shorter one) have
//     arrived, carrying them; until then it waits on the message (Msg.peekers)
//     without being matched to it, and the message stays queued;
//   - lock order is Box.mu before Msg.mu; Write takes only Msg.mu.
package demux

import (
	"bytes"
	"context"
	"slices"
	"sync"

	"github.com/cohortml/cohort/distributed/transport"
)

// chunkBytes is the unit of private storage for a long message no receiver
// is waiting for: such a message is stored in pooled chunks taken as its
// bytes arrive. So a receiver that shows up soon after the message started
// copies only what arrived before it (the rest goes straight into its
// buffer), fresh memory is rarely touched, and a header that overstates a
// length costs memory only in proportion to the bytes that really come.
// Shorter messages get one exact-size buffer.
const chunkBytes = 1 << 20

// discardBytes bounds the scratch buffer used to drain messages nobody will
// receive (after Close).
const discardBytes = 64 << 10

// Box holds the messages from one peer, queued by tag, and the receivers
// waiting for them. All methods are safe for concurrent use; Begin, Write,
// Done and Abort are meant for a single source goroutine at a time per
// message.
type Box struct {
	peer     int // the rank the messages come from, for errors
	mu       sync.Mutex
	streams  map[transport.Tag]*stream
	inflight map[*Msg]struct{} // begun, neither done nor aborted
	failed   error             // the source is gone: Recvs that find nothing queued fail with it
	closed   error             // the receiver is gone: everything fails with it
	pool     sync.Pool         // of *[]byte chunks of chunkBytes
}

// stream is the per-tag state. At most one of msgs and waiters is non-empty
// at any time, except transiently inside Box methods.
type stream struct {
	msgs    []*Msg     // unclaimed messages, oldest first (complete or being written)
	waiters []*Pending // receivers with no message yet, oldest first
}

// Msg is one incoming message.
type Msg struct {
	box *Box
	tag transport.Tag
	n   int

	mu       sync.Mutex
	dst      []byte    // the matched receiver's buffer, or a private one for a short message
	chunks   []*[]byte // private storage of a long unclaimed message (when dst is nil)
	off      int       // bytes written so far
	w        *Pending  // matched receiver, nil if unclaimed
	complete bool
	dropped  bool   // aborted or discarded: Write throws bytes away
	scratch  []byte // sink for dropped bytes

	head    [transport.LengthPrefixBytes]byte // the first bytes written
	peekers []*Pending                        // receivers that do not fit, waiting for head
}

// Pending is a posted receive.
type Pending struct {
	b    *Box
	tag  transport.Tag
	p    []byte
	done chan struct{} // closed when err is final
	err  error
	m    *Msg // matched message, set under Box.mu
	peek *Msg // message this receiver does not fit and waits on for its head, set under Box.mu
	fin  bool // err is final; guarded by Msg.mu of m or peek, or Box.mu when neither
}

// New returns an empty box for the messages from rank peer. Its errors
// carry no coordinates in their text: callers wrap them with rank, peer and
// tag.
func New(peer int) *Box {
	return &Box{
		peer:     peer,
		streams:  make(map[transport.Tag]*stream),
		inflight: make(map[*Msg]struct{}),
	}
}

func (b *Box) stream(tag transport.Tag) *stream {
	s := b.streams[tag]
	if s == nil {
		s = &stream{}
		b.streams[tag] = s
	}
	return s
}

// gc drops the stream of tag if it holds nothing. Caller holds b.mu.
func (b *Box) gc(tag transport.Tag, s *stream) {
	if len(s.msgs) == 0 && len(s.waiters) == 0 {
		delete(b.streams, tag)
	}
}

// prefixLen is how many of m's first bytes a length error carries.
func (m *Msg) prefixLen() int { return min(m.n, len(m.head)) }

// lengthError reports a Recv whose buffer of want bytes does not fit m,
// with m's first bytes as far as they have arrived. Caller holds m.mu.
func (m *Msg) lengthError(want int) error {
	return &transport.LengthError{Peer: m.box.peer, Tag: m.tag, Got: m.n, Want: want,
		Prefix: bytes.Clone(m.head[:min(m.off, m.prefixLen())])}
}

// peek makes w, whose buffer does not fit m, fail with a length error once
// m's head has arrived (at once if it has). Caller holds b.mu and m.mu.
func (m *Msg) peek(w *Pending) {
	if m.off >= m.prefixLen() || m.complete || m.dropped {
		w.finish(m.lengthError(len(w.p)))
		return
	}
	w.peek = m
	m.peekers = append(m.peekers, w)
}

// releasePeekers fails m's waiting peekers with err, or with a length error
// if err is nil. Caller holds m.mu.
func (m *Msg) releasePeekers(err error) {
	for i, w := range m.peekers {
		if err != nil {
			w.finish(err)
		} else {
			w.finish(m.lengthError(len(w.p)))
		}
		m.peekers[i] = nil
	}
	m.peekers = m.peekers[:0]
}

// finish completes w with err. Caller holds the lock that guards w.fin.
func (w *Pending) finish(err error) {
	if w.fin {
		return
	}
	w.err = err
	w.fin = true
	close(w.done)
}

// Begin announces a message of n bytes under tag and returns it for the
// source to fill. If the receiver side is closed the message is accepted and
// silently discarded.
func (b *Box) Begin(tag transport.Tag, n int) *Msg {
	m := &Msg{box: b, tag: tag, n: n}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed != nil {
		m.dropped = true
		return m
	}
	b.inflight[m] = struct{}{}
	s := b.stream(tag)
	if len(s.msgs) == 0 {
		for len(s.waiters) > 0 {
			w := s.waiters[0]
			s.waiters[0] = nil
			s.waiters = s.waiters[1:]
			if len(w.p) != n {
				// The message stays queued for a Recv of the right size;
				// w fails once the message's head is in.
				m.mu.Lock()
				m.peek(w)
				m.mu.Unlock()
				continue
			}
			m.w = w
			w.m = m
			m.dst = w.p
			b.gc(tag, s)
			return m
		}
	}
	if n <= chunkBytes {
		m.dst = make([]byte, n)
	}
	s.msgs = append(s.msgs, m)
	return m
}

// Write lets fill write the next bytes of the message into dst, a part of
// the destination not yet written (never empty unless the message is
// complete; possibly shorter than what remains), and records how many it
// wrote. fill runs with the message locked and must not block for long (a
// non-blocking read or a copy): a cancelled receiver waits for it. Write
// returns fill's results.
func (m *Msg) Write(fill func(dst []byte) (int, error)) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var dst []byte
	switch {
	case m.dropped:
		if m.scratch == nil {
			m.scratch = make([]byte, min(m.n, discardBytes))
		}
		dst = m.scratch[:min(m.n-m.off, len(m.scratch))]
	case m.dst != nil:
		dst = m.dst[m.off:]
	default:
		i, at := m.off/chunkBytes, m.off%chunkBytes
		if i == len(m.chunks) {
			m.chunks = append(m.chunks, m.box.getChunk())
		}
		dst = (*m.chunks[i])[at:min(chunkBytes, m.n-i*chunkBytes)]
	}
	k, err := fill(dst)
	if m.off < len(m.head) {
		copy(m.head[m.off:], dst[:k])
	}
	m.off += k
	if len(m.peekers) > 0 && m.off >= m.prefixLen() {
		m.releasePeekers(nil)
	}
	return k, err
}

// Deliver writes all of p (len(p) must be the message length) and
// completes the message: a whole in-memory message in one call.
func (m *Msg) Deliver(p []byte) {
	for off := 0; off < len(p); {
		k, _ := m.Write(func(dst []byte) (int, error) { return copy(dst, p[off:]), nil })
		off += k
	}
	m.Done()
}

// Remaining returns the number of bytes still to be written.
func (m *Msg) Remaining() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.n - m.off
}

// Len returns the message length.
func (m *Msg) Len() int { return m.n }

func (b *Box) getChunk() *[]byte {
	if c, ok := b.pool.Get().(*[]byte); ok {
		return c
	}
	c := make([]byte, chunkBytes)
	return &c
}

// release drops m's private storage, returning chunks to the pool. Caller
// holds m.mu.
func (m *Msg) release() {
	for _, c := range m.chunks {
		m.box.pool.Put(c)
	}
	m.chunks = nil
	m.dst = nil
}

// copyOut copies the bytes written so far from m's private storage into p.
// Caller holds m.mu.
func (m *Msg) copyOut(p []byte) {
	if m.dst != nil {
		copy(p, m.dst[:m.off])
		return
	}
	for i, c := range m.chunks {
		lo := i * chunkBytes
		copy(p[lo:min(m.off, lo+chunkBytes)], *c)
	}
}

// storePrivate gives m private storage holding p[:m.off]. Caller holds m.mu.
func (m *Msg) storePrivate(p []byte) {
	if m.n <= chunkBytes {
		m.dst = make([]byte, m.n)
		copy(m.dst, p[:m.off])
		return
	}
	m.dst = nil
	for lo := 0; lo < m.off; lo += chunkBytes {
		c := m.box.getChunk()
		copy(*c, p[lo:min(m.off, lo+chunkBytes)])
		m.chunks = append(m.chunks, c)
	}
}

// Done marks the message complete: its receiver, if any, returns; else it
// waits in the queue for one.
func (m *Msg) Done() {
	b := m.box
	b.mu.Lock()
	delete(b.inflight, m)
	b.mu.Unlock()
	m.mu.Lock()
	m.complete = true
	m.releasePeekers(nil)
	if m.w != nil {
		m.w.finish(nil)
		m.w = nil
		m.dst = nil
	}
	m.mu.Unlock()
}

// Abort gives up on the message: its receiver, if any, fails with err; an
// unclaimed message is removed from the queue.
func (m *Msg) Abort(err error) {
	b := m.box
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.inflight, m)
	m.mu.Lock()
	defer m.mu.Unlock()
	m.dropped = true
	m.releasePeekers(nil) // the length mismatch is what they were told of first
	if m.w != nil {
		m.w.finish(err)
		m.w = nil
		m.dst = nil
		return
	}
	m.release()
	if s := b.streams[m.tag]; s != nil {
		for i, q := range s.msgs {
			if q == m {
				s.msgs = append(s.msgs[:i], s.msgs[i+1:]...)
				break
			}
		}
		b.gc(m.tag, s)
	}
}

// Recv receives the next message under tag into p, blocking until one
// arrives, ctx ends, or the box fails or closes. A message whose length
// differs from len(p) is a *transport.LengthError, returned once the
// message's first bytes have arrived (see transport.LengthError), and the
// message stays queued. A Recv cancelled by ctx does not consume a message;
// one cancelled while waiting for the first bytes of a message it does not
// fit returns the length error with the bytes that arrived.
func (b *Box) Recv(ctx context.Context, tag transport.Tag, p []byte) error {
	q, err := b.Post(tag, p)
	if q == nil {
		return err
	}
	return q.Wait(ctx)
}

// Post starts a receive of the next message under tag into p. If it can
// finish at once (a complete message is queued, or an error) it returns a
// nil Pending and the result; otherwise the receive is registered, and
// the caller polls the Pending's Done or blocks in its Wait. Either way,
// Wait must eventually be called on a non-nil Pending.
func (b *Box) Post(tag transport.Tag, p []byte) (*Pending, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed != nil {
		return nil, b.closed
	}
	s := b.streams[tag]
	if s != nil && len(s.msgs) > 0 {
		m := s.msgs[0]
		if m.n != len(p) {
			w := &Pending{b: b, tag: tag, p: p, done: make(chan struct{})}
			m.mu.Lock()
			m.peek(w)
			m.mu.Unlock()
			if w.peek == nil {
				return nil, w.err
			}
			return w, nil
		}
		s.msgs[0] = nil
		s.msgs = s.msgs[1:]
		b.gc(tag, s)
		m.mu.Lock()
		defer m.mu.Unlock()
		m.copyOut(p)
		m.release()
		if m.complete {
			return nil, nil
		}
		// Still arriving: the rest goes straight into p.
		w := &Pending{b: b, tag: tag, p: p, done: make(chan struct{}), m: m}
		m.w = w
		m.dst = p
		return w, nil
	}
	if b.failed != nil {
		return nil, b.failed
	}
	w := &Pending{b: b, tag: tag, p: p, done: make(chan struct{})}
	if s == nil {
		s = b.stream(tag)
	}
	s.waiters = append(s.waiters, w)
	return w, nil
}

// Quiet reports whether the box holds nothing under tag (no message, no
// receiver waiting) and has neither failed nor closed: the next message
// the source sees under tag is then the next one for a receiver of tag,
// who may take it from the source directly instead of through the box.
func (b *Box) Quiet(tag transport.Tag) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.failed != nil || b.closed != nil {
		return false
	}
	_, ok := b.streams[tag]
	return !ok
}

// Done reports, without blocking, whether the receive has finished; Wait
// then returns its result at once.
func (w *Pending) Done() bool {
	select {
	case <-w.done:
		return true
	default:
		return false
	}
}

// Wait blocks until the receive finishes or ctx ends; in the latter case
// the receive is withdrawn without consuming a message.
func (w *Pending) Wait(ctx context.Context) error {
	select {
	case <-w.done:
		return w.err
	case <-ctx.Done():
	}
	if w.b.detach(w.tag, w, nil) {
		return ctx.Err()
	}
	<-w.done // finished concurrently: its result stands
	return w.err
}

// detach withdraws w. It reports false if w had already finished. With
// failErr nil a partly written message is put back, with what it holds so
// far, at the head of its tag's queue; otherwise it is dropped and w fails
// with failErr.
func (b *Box) detach(tag transport.Tag, w *Pending, failErr error) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if m := w.peek; m != nil {
		// Waiting for the head of a message it does not fit: it fails
		// with the length error and what of the head has arrived.
		m.mu.Lock()
		defer m.mu.Unlock()
		if !w.fin {
			m.peekers = slices.DeleteFunc(m.peekers, func(q *Pending) bool { return q == w })
			w.finish(m.lengthError(len(w.p)))
		}
		return false
	}
	m := w.m
	if m == nil {
		if w.fin {
			return false
		}
		s := b.streams[tag]
		if s != nil {
			for i, q := range s.waiters {
				if q == w {
					s.waiters = append(s.waiters[:i], s.waiters[i+1:]...)
					break
				}
			}
			b.gc(tag, s)
		}
		if failErr != nil {
			w.finish(failErr)
		} else {
			w.fin = true
		}
		return true
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if w.fin {
		return false
	}
	m.w = nil
	if failErr != nil {
		m.dropped = true
		m.dst = nil
		w.finish(failErr)
		return true
	}
	w.fin = true
	m.storePrivate(w.p)
	s := b.stream(tag)
	s.msgs = append([]*Msg{m}, s.msgs...)
	return true
}

// Fail records that the source is gone with err: receivers waiting on an
// empty queue fail with it now, later ones as soon as their tag's queue is
// empty. Messages already complete stay receivable. The source must not
// call Begin afterwards; it aborts its in-flight messages itself.
func (b *Box) Fail(err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.failed != nil || b.closed != nil {
		return
	}
	b.failed = err
	for tag, s := range b.streams {
		if len(s.msgs) > 0 {
			continue
		}
		for _, w := range s.waiters {
			w.finish(err)
		}
		s.waiters = nil
		b.gc(tag, s)
	}
}

// Close fails every receiver, waiting or matched, with err and drops all
// queued messages; later Recvs fail with err and later messages are
// discarded. The source may keep calling Write on its in-flight messages:
// their bytes are thrown away.
func (b *Box) Close(err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed != nil {
		return
	}
	b.closed = err
	for m := range b.inflight {
		m.mu.Lock()
		m.dropped = true
		m.release()
		m.releasePeekers(err)
		if m.w != nil {
			m.w.finish(err)
			m.w = nil
		}
		m.mu.Unlock()
	}
	for _, s := range b.streams {
		for _, w := range s.waiters {
			w.finish(err)
		}
	}
	clear(b.streams)
}

// Pending reports how many messages are queued unclaimed and how many
// receivers are waiting (for a message, or for the head of one they do not
// fit); for tests and diagnostics.
func (b *Box) Pending() (msgs, waiters int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, s := range b.streams {
		msgs += len(s.msgs)
		waiters += len(s.waiters)
	}
	for m := range b.inflight {
		m.mu.Lock()
		waiters += len(m.peekers)
		m.mu.Unlock()
	}
	return msgs, waiters
}
