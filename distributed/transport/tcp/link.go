package tcp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cohortml/cohort/distributed/transport"
	"github.com/cohortml/cohort/distributed/transport/internal/demux"
	"github.com/cohortml/cohort/distributed/wire"
)

const (
	// readBufBytes is the reader's buffer: headers and small payloads are
	// read through it, several frames per read system call when they are
	// queued.
	readBufBytes = 256 << 10
	// directMin is the payload remainder from which the reader reads from
	// the socket straight into the destination rather than through its
	// buffer.
	directMin = 32 << 10
	// stageMax is the largest payload a writer copies next to its header
	// to send both in one write; longer ones go out with writev.
	stageMax = 64 << 10
)

var (
	errPeerClosed   = errors.New("closed its transport")
	errAbandoned    = errors.New("the sender abandoned the message (its send was cancelled)")
	errLocalClose   = errors.New("link closed by this rank")
	errCancelledMid = errors.New("a send was cancelled in the middle of a frame; the link cannot be resynchronised")
)

// aLongTimeAgo is a deadline in the past, to unblock a pending call.
var aLongTimeAgo = time.Unix(1, 0)

// cancelGrace is how long a write whose context ended may still take to
// finish its frame. A frame cut short leaves the peer with half a frame
// and forces the link down; one that completes keeps the link usable.
const cancelGrace = 500 * time.Millisecond

// link is the connection to one peer. Frames are written whole under wmu;
// at most one multi-frame message is in flight per direction (bigmu), so
// continuation frames need no message id.
type link struct {
	t    *Transport
	peer int
	conn *net.TCPConn
	rc   syscall.RawConn
	box  *demux.Box

	wmu   sync.Mutex // one frame at a time on the socket
	stage []byte     // header plus a small payload, guarded by wmu
	bigmu sync.Mutex // one multi-frame message at a time

	rd reader // the frames coming in

	err        atomic.Pointer[transport.PeerError] // set once the link is down
	closeAck   chan struct{}                       // closed when the peer acknowledges our Close
	ackOnce    sync.Once
	readerDone chan struct{}
}

func newLink(t *Transport, peer int, conn *net.TCPConn) (*link, error) {
	rc, err := conn.SyscallConn()
	if err != nil {
		return nil, err
	}
	l := &link{
		t:          t,
		peer:       peer,
		conn:       conn,
		rc:         rc,
		box:        demux.New(peer),
		stage:      make([]byte, wire.HeaderBytes+stageMax),
		closeAck:   make(chan struct{}),
		readerDone: make(chan struct{}),
	}
	l.rd = reader{l: l, buf: make([]byte, readBufBytes)}
	return l, nil
}

// down returns the link's failure, nil while it is up.
func (l *link) down() error {
	if pe := l.err.Load(); pe != nil {
		return pe
	}
	return nil
}

// fail marks the link down with cause (first cause wins), fails the
// receivers waiting on it, and closes the socket to unblock writers. It
// reports whether this call took the link down.
func (l *link) fail(cause error) bool {
	pe := &transport.PeerError{Peer: l.peer, Err: cause}
	if !l.err.CompareAndSwap(nil, pe) {
		return false
	}
	l.box.Fail(pe)
	if cause != errPeerClosed {
		l.conn.Close()
	}
	if !l.t.closed.Load() {
		l.t.opts.Logger.Warn("tcp: link down", "rank", l.t.rank, "peer", l.peer, "err", cause)
	}
	return true
}

// write sends one frame. It blocks until the frame is in the socket
// buffer. If ctx ends first, the frame is given cancelGrace more to go
// out; if it does, write succeeds, and if it cannot even start, write
// returns ctx's error with the link intact; a frame cut in the middle
// takes the link down, as the peer would see half a frame. A writer
// somebody waits for first writes without blocking for a while (see
// spinWrite).
func (l *link) write(ctx context.Context, h wire.Header, p []byte) error {
	h.Length = uint32(len(p))
	l.wmu.Lock()
	defer l.wmu.Unlock()
	if err := l.down(); err != nil {
		return err
	}
	var hb [wire.HeaderBytes]byte
	var bufs net.Buffers
	if len(p) <= stageMax {
		h.Put(l.stage)
		k := copy(l.stage[wire.HeaderBytes:], p)
		bufs = net.Buffers{l.stage[:wire.HeaderBytes+k]}
	} else {
		h.Put(hb[:])
		bufs = net.Buffers{hb[:], p}
	}
	var n int64
	var err error
	if budget, ok := l.t.pollBudget(ctx, len(p)); ok {
		n, err = l.spinWrite(ctx, &bufs, budget)
	}
	if err == nil && len(bufs) > 0 {
		var m int64
		m, err = l.writeBlocking(ctx, &bufs)
		n += m
	}
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		if n == 0 {
			l.conn.SetWriteDeadline(time.Time{})
			return ctx.Err()
		}
		l.fail(errCancelledMid)
		return ctx.Err()
	}
	if l.t.closed.Load() {
		return transport.ErrClosed
	}
	l.fail(fmt.Errorf("write: %w", describe(err)))
	return l.down()
}

// writeBlocking writes bufs through the runtime's poller, consuming what
// it writes. If ctx ends, the write gets cancelGrace more.
func (l *link) writeBlocking(ctx context.Context, bufs *net.Buffers) (int64, error) {
	var stop func() bool
	var fired chan struct{}
	if ctx.Done() != nil {
		fired = make(chan struct{})
		stop = context.AfterFunc(ctx, func() {
			l.conn.SetWriteDeadline(time.Now().Add(cancelGrace))
			close(fired)
		})
	}
	n, err := bufs.WriteTo(l.conn)
	if stop != nil && !stop() {
		<-fired
		if err == nil {
			l.conn.SetWriteDeadline(time.Time{})
		}
	}
	return n, err
}

// spinWrite writes bufs with non-blocking system calls for at most budget
// or until ctx ends, consuming what it writes, and returns how much it
// wrote; the caller writes the rest blocking. While the socket is full
// it advances the link's reader instead of waiting (as pollFor does):
// two ranks that send to each other at once each drain the other's
// bytes, with no goroutine wake-up in between, where blocking writers
// would both wait for their reader goroutines' wake-ups. Its error is
// one of the socket's (never EAGAIN).
func (l *link) spinWrite(ctx context.Context, bufs *net.Buffers, budget time.Duration) (int64, error) {
	deadline := time.Now().Add(budget)
	var total int64
	for i := 0; len(*bufs) > 0; i++ {
		var k int
		var werr, rerr error
		cerr := l.rc.Control(func(fd uintptr) {
			k, werr = writev(int(fd), *bufs)
			if werr == unix.EAGAIN {
				rerr = l.tryPump(int(fd))
			}
		})
		if cerr != nil {
			return total, cerr
		}
		if k > 0 {
			total += int64(k)
			consume(bufs, k)
		}
		if werr != nil && werr != unix.EAGAIN {
			return total, werr
		}
		if rerr != nil {
			l.readFailed(rerr)
		}
		if i%16 == 15 {
			if ctx.Err() != nil || time.Now().After(deadline) {
				return total, nil
			}
			runtime.Gosched()
		}
	}
	return total, nil
}

// consume drops the first n bytes of bufs.
func consume(bufs *net.Buffers, n int) {
	for n > 0 {
		b := (*bufs)[0]
		if n < len(b) {
			(*bufs)[0] = b[n:]
			return
		}
		n -= len(b)
		*bufs = (*bufs)[1:]
	}
	for len(*bufs) > 0 && len((*bufs)[0]) == 0 {
		*bufs = (*bufs)[1:]
	}
}

// writev is one non-blocking writev system call (EINTR retried).
func writev(fd int, bufs net.Buffers) (int, error) {
	for {
		k, err := unix.Writev(fd, bufs)
		if err == unix.EINTR {
			continue
		}
		return max(k, 0), err
	}
}

// send writes message p under tag, in chunks if it is long.
func (l *link) send(ctx context.Context, tag transport.Tag, p []byte) error {
	h := wire.Header{Kind: wire.KindData, Group: tag.Group, Step: tag.Step, Seq: tag.Seq, Aux: uint64(len(p))}
	chunk := int(l.t.opts.ChunkBytes)
	if len(p) <= chunk {
		return l.write(ctx, h, p)
	}
	l.bigmu.Lock()
	defer l.bigmu.Unlock()
	for off := 0; off < len(p); off += chunk {
		if off > 0 {
			h.Kind, h.Aux = wire.KindMore, uint64(off)
			if ctx.Err() != nil {
				l.cancelMessage(tag)
				return ctx.Err()
			}
		}
		if err := l.write(ctx, h, p[off:min(off+chunk, len(p))]); err != nil {
			if off > 0 && ctx.Err() != nil && l.down() == nil {
				l.cancelMessage(tag)
			}
			return err
		}
	}
	return nil
}

// cancelMessage tells the peer to drop the partly sent message under tag.
func (l *link) cancelMessage(tag transport.Tag) {
	ctx, cancel := context.WithTimeout(context.Background(), l.t.opts.CloseTimeout)
	defer cancel()
	_ = l.write(ctx, wire.Header{Kind: wire.KindCancel, Group: tag.Group, Step: tag.Step, Seq: tag.Seq}, nil)
}

// shutdown says goodbye: a Close frame, then waiting (bounded) for the
// peer to acknowledge that it read everything, then closing the socket.
// The socket is closed by then at the latest; readers are waited for.
func (l *link) shutdown(timeout time.Duration) {
	if l.down() == nil {
		l.conn.SetWriteDeadline(time.Now().Add(timeout))
		l.wmu.Lock()
		h := wire.Header{Kind: wire.KindClose}
		h.Put(l.stage)
		_, err := l.conn.Write(l.stage[:wire.HeaderBytes])
		l.wmu.Unlock()
		if err == nil {
			timer := time.NewTimer(timeout)
			select {
			case <-l.closeAck:
			case <-l.readerDone:
			case <-timer.C:
			}
			timer.Stop()
		}
	}
	l.err.CompareAndSwap(nil, &transport.PeerError{Peer: l.peer, Err: errLocalClose})
	l.conn.Close()
	<-l.readerDone
}

// kill drops the connection without a goodbye (reset), as a crash would.
func (l *link) kill() {
	l.conn.SetLinger(0)
	l.err.CompareAndSwap(nil, &transport.PeerError{Peer: l.peer, Err: errLocalClose})
	l.conn.Close()
	<-l.readerDone
}

// readLoop is the link's reader goroutine: it waits in the runtime's
// poller until the socket is readable, then pumps. A receiver polling for
// its message (pollFor) pumps too, taking turns with it (reader.mu).
func (l *link) readLoop() {
	defer close(l.readerDone)
	var err error
	for err == nil {
		rerr := l.rc.Read(func(fd uintptr) bool {
			l.rd.mu.Lock()
			wouldBlock, e := l.rd.pump(int(fd))
			l.rd.mu.Unlock()
			if e != nil {
				err = e
				return true
			}
			return !wouldBlock // nothing more to read: wait for the poller
		})
		if err == nil {
			err = rerr
		}
	}
	l.readFailed(err)
}

// readFailed ends reading after err: the message in progress is aborted
// and, unless this rank is closing, the link goes down. The first caller
// (reader goroutine or polling receiver) decides the cause.
func (l *link) readFailed(err error) {
	err = describe(err)
	l.rd.mu.Lock()
	r := &l.rd
	pe := &transport.PeerError{Peer: l.peer, Err: err}
	if r.pm != nil && r.pm != r.cur {
		r.pm.Abort(pe)
	}
	if r.cur != nil {
		r.cur.Abort(pe)
	}
	r.pm, r.cur = nil, nil
	l.rd.mu.Unlock()
	if l.t.closed.Load() || l.down() != nil {
		return
	}
	l.fail(err)
}

// pollFor polls the socket on the calling goroutine until w finishes or
// the budget runs out, instead of waiting for the reader goroutine to be
// woken: a receiver that is waiting anyway spends its own CPU, and the
// message is in as soon as it arrives (no thread wake-up in between).
// Frames for other receivers met on the way are delivered as the reader
// goroutine would. It stops early when ctx ends, so that a cancelled
// receive returns at once rather than after the budget.
func (l *link) pollFor(ctx context.Context, w *demux.Pending, budget time.Duration) {
	deadline := time.Now().Add(budget)
	for i := 0; !w.Done(); i++ {
		var err error
		cerr := l.rc.Control(func(fd uintptr) { err = l.tryPump(int(fd)) })
		if cerr != nil || l.down() != nil {
			return
		}
		if err != nil {
			l.readFailed(err)
			return
		}
		if i%16 == 15 {
			if ctx.Err() != nil || time.Now().After(deadline) {
				return
			}
			runtime.Gosched() // let this process's other goroutines run
		}
	}
}

// tryPump advances the reader on socket fd unless another goroutine is
// advancing it (the reader goroutine, or another poller).
func (l *link) tryPump(fd int) error {
	if !l.rd.mu.TryLock() {
		return nil
	}
	defer l.rd.mu.Unlock()
	_, err := l.rd.pump(fd)
	return err
}

// describe turns the errors of a vanished peer into plain words.
func describe(err error) error {
	switch {
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return fmt.Errorf("connection closed without a goodbye (process exited?): %w", err)
	case errors.Is(err, syscall.ECONNRESET):
		return fmt.Errorf("connection reset (process killed?): %w", err)
	}
	return err
}

// reader parses the frames of one connection, as a state machine fed by
// non-blocking reads (pump), so that whoever holds mu may advance it: the
// reader goroutine, or a receiver polling for its message.
type reader struct {
	mu   sync.Mutex // held while pumping; guards everything below
	l    *link
	buf  []byte
	r, w int // unread bytes are buf[r:w]
	err  error

	// The frame whose payload is arriving: pn more bytes go into pm.
	pm    *demux.Msg
	pn    int
	pkind wire.Kind
	plen  uint64 // the frame's payload length
	paux  uint64 // its message length (data) or offset (more)

	cur      *demux.Msg // multi-frame message in progress
	curTag   transport.Tag
	curOff   uint64
	curTotal uint64
}

func (r *reader) protocolError(format string, args ...any) error {
	return fmt.Errorf("protocol error: "+format, args...)
}

// read is one non-blocking read system call into dst (EINTR retried).
func read(fd int, dst []byte) (int, error) {
	for {
		k, err := unix.Read(fd, dst)
		if err == unix.EINTR {
			continue
		}
		if k < 0 {
			k = 0
		}
		if err == nil && k == 0 && len(dst) > 0 {
			err = io.EOF
		}
		return k, err
	}
}

// pump reads what the socket fd holds and handles every frame that is
// then complete, until a read would block (wouldBlock) or fails. Long
// payloads (directMin and more left) are read from the socket straight
// into their destination. The caller holds mu. An error is sticky.
func (r *reader) pump(fd int) (wouldBlock bool, err error) {
	if r.err != nil {
		return false, r.err
	}
	defer func() {
		if err != nil {
			r.err = err
		}
	}()
	for {
		if err := r.process(); err != nil {
			return false, err
		}
		if r.pm != nil && r.pn >= directMin && r.r == r.w {
			k, err := r.pm.Write(func(dst []byte) (int, error) { return read(fd, dst[:min(len(dst), r.pn)]) })
			if err == unix.EAGAIN {
				return true, nil
			}
			if err != nil {
				return false, noEOF(err)
			}
			r.pn -= k
			if r.pn == 0 {
				if err := r.endPayload(); err != nil {
					return false, err
				}
			}
			continue
		}
		if r.r > 0 {
			r.w = copy(r.buf, r.buf[r.r:r.w])
			r.r = 0
		}
		k, err := read(fd, r.buf[r.w:])
		if err == unix.EAGAIN {
			return true, nil
		}
		if err != nil {
			if r.pm != nil || r.w > 0 {
				err = noEOF(err)
			}
			return false, err
		}
		r.w += k
	}
}

// process handles the buffered bytes: payload into the frame in
// progress, then every complete header. It leaves the buffer empty or
// holding part of a header.
func (r *reader) process() error {
	l := r.l
	maxMsg := uint64(l.t.opts.MaxMessageBytes)
	for {
		if r.pm != nil {
			for r.pn > 0 && r.r < r.w {
				src := r.buf[r.r : r.r+min(r.pn, r.w-r.r)]
				wrote, _ := r.pm.Write(func(dst []byte) (int, error) { return copy(dst, src), nil })
				r.r += wrote
				r.pn -= wrote
			}
			if r.pn > 0 {
				return nil
			}
			if err := r.endPayload(); err != nil {
				return err
			}
		}
		if r.w-r.r < wire.HeaderBytes {
			return nil
		}
		h, err := wire.DecodeHeader(r.buf[r.r:r.w], uint32(wire.DefaultMaxLength))
		if err != nil {
			return r.protocolError("%w", err)
		}
		r.r += wire.HeaderBytes
		tag := transport.Tag{Group: h.Group, Seq: h.Seq, Step: h.Step}
		switch h.Kind {
		case wire.KindData:
			if h.Aux > maxMsg {
				return r.protocolError("%w", &wire.LengthError{What: "message", Length: h.Aux, Limit: maxMsg})
			}
			if uint64(h.Length) > h.Aux {
				return r.protocolError("data frame of %d bytes for a %d-byte message", h.Length, h.Aux)
			}
			if uint64(h.Length) < h.Aux && r.cur != nil {
				return r.protocolError("a second long message (%v) started before the first (%v) ended", tag, r.curTag)
			}
			r.pm, r.pn, r.pkind, r.plen, r.paux = l.box.Begin(tag, int(h.Aux)), int(h.Length), h.Kind, uint64(h.Length), h.Aux
			if uint64(h.Length) < h.Aux {
				r.curTag = tag
			}
		case wire.KindMore:
			if r.cur == nil || tag != r.curTag || h.Aux != r.curOff || r.curOff+uint64(h.Length) > r.curTotal {
				return r.protocolError("unexpected continuation frame (%v, offset %d, %d bytes)", tag, h.Aux, h.Length)
			}
			r.pm, r.pn, r.pkind, r.plen, r.paux = r.cur, int(h.Length), h.Kind, uint64(h.Length), h.Aux
		case wire.KindCancel:
			if h.Length != 0 {
				return r.protocolError("cancel frame with a %d-byte payload", h.Length)
			}
			if r.cur != nil && tag == r.curTag {
				r.cur.Abort(fmt.Errorf("rank %d: %w", l.peer, errAbandoned))
				r.cur = nil
			}
		case wire.KindClose:
			if h.Length != 0 {
				return r.protocolError("close frame with a %d-byte payload", h.Length)
			}
			if r.cur != nil {
				return r.protocolError("close in the middle of a message (%v)", r.curTag)
			}
			// Everything the peer sent is in; acknowledge, then refuse
			// further sends to it.
			l.ackClose()
			l.fail(errPeerClosed)
		case wire.KindCloseAck:
			l.ackOnce.Do(func() { close(l.closeAck) })
		default:
			return r.protocolError("unexpected %v frame", h.Kind)
		}
	}
}

// ackClose writes the acknowledgement of the peer's Close frame, after
// the frame being written if there is one. The reader may be advanced
// by a writer that holds wmu (spinWrite); the acknowledgement then goes
// out on a goroutine of its own once that writer is done.
func (l *link) ackClose() {
	if l.down() != nil {
		return
	}
	ack := func() { // with wmu held
		defer l.wmu.Unlock()
		var hb [wire.HeaderBytes]byte
		wire.Header{Kind: wire.KindCloseAck}.Put(hb[:])
		_, _ = l.conn.Write(hb[:])
	}
	if l.wmu.TryLock() {
		ack()
		return
	}
	go func() {
		l.wmu.Lock()
		ack()
	}()
}

// endPayload finishes the frame whose payload is complete: a whole
// message is done; the first or a continuation frame of a long one
// advances it.
func (r *reader) endPayload() error {
	m := r.pm
	r.pm = nil
	if r.pkind == wire.KindData {
		if r.plen == r.paux {
			m.Done()
			return nil
		}
		r.cur, r.curOff, r.curTotal = m, r.plen, r.paux
		return nil
	}
	r.curOff += r.plen
	if r.curOff == r.curTotal {
		r.cur.Done()
		r.cur = nil
	}
	return nil
}

func noEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}
