package tcp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"cohort/dist/transport"
	"cohort/dist/transport/internal/demux"
	"cohort/dist/wire"
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
	return &link{
		t:          t,
		peer:       peer,
		conn:       conn,
		rc:         rc,
		box:        demux.New(peer),
		stage:      make([]byte, wire.HeaderBytes+stageMax),
		closeAck:   make(chan struct{}),
		readerDone: make(chan struct{}),
	}, nil
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
// takes the link down, as the peer would see half a frame.
func (l *link) write(ctx context.Context, h wire.Header, p []byte) error {
	h.Length = uint32(len(p))
	l.wmu.Lock()
	defer l.wmu.Unlock()
	if err := l.down(); err != nil {
		return err
	}
	var stop func() bool
	var fired chan struct{}
	if ctx.Done() != nil {
		fired = make(chan struct{})
		stop = context.AfterFunc(ctx, func() {
			l.conn.SetWriteDeadline(time.Now().Add(cancelGrace))
			close(fired)
		})
	}
	var n int64
	var err error
	if len(p) <= stageMax {
		h.Put(l.stage)
		k := copy(l.stage[wire.HeaderBytes:], p)
		var m int
		m, err = l.conn.Write(l.stage[:wire.HeaderBytes+k])
		n = int64(m)
	} else {
		var hb [wire.HeaderBytes]byte
		h.Put(hb[:])
		bufs := net.Buffers{hb[:], p}
		n, err = bufs.WriteTo(l.conn)
	}
	if stop != nil && !stop() {
		<-fired
		if err == nil {
			l.conn.SetWriteDeadline(time.Time{})
		}
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

// readLoop is the link's reader goroutine.
func (l *link) readLoop() {
	defer close(l.readerDone)
	r := reader{l: l, buf: make([]byte, readBufBytes)}
	err := describe(r.run())
	if r.cur != nil {
		r.cur.Abort(&transport.PeerError{Peer: l.peer, Err: err})
	}
	if l.t.closed.Load() || l.down() != nil {
		return
	}
	l.fail(err)
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

// reader parses the frames of one connection.
type reader struct {
	l    *link
	buf  []byte
	r, w int // unread bytes are buf[r:w]

	cur      *demux.Msg // multi-frame message in progress
	curTag   transport.Tag
	curOff   uint64
	curTotal uint64
}

func (r *reader) fill(need int) error {
	if r.w-r.r >= need {
		return nil
	}
	if r.r > 0 {
		r.w = copy(r.buf, r.buf[r.r:r.w])
		r.r = 0
	}
	for r.w < need {
		n, err := r.readSome()
		r.w += n
		if err != nil {
			if r.w >= need {
				return nil
			}
			return err
		}
	}
	return nil
}

// readSome reads what the socket has into the free part of the buffer,
// waiting in the runtime's poller when it has nothing. (Polling the socket
// in a loop before parking was measured slower on a 2-core host: the spin
// takes the CPU the peer needs to answer.)
func (r *reader) readSome() (int, error) {
	return r.l.conn.Read(r.buf[r.w:])
}

func (r *reader) protocolError(format string, args ...any) error {
	return fmt.Errorf("protocol error: "+format, args...)
}

func (r *reader) run() error {
	l := r.l
	maxMsg := uint64(l.t.opts.MaxMessageBytes)
	for {
		if err := r.fill(wire.HeaderBytes); err != nil {
			return err
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
			m := l.box.Begin(tag, int(h.Aux))
			if err := r.payload(m, int(h.Length)); err != nil {
				m.Abort(&transport.PeerError{Peer: l.peer, Err: describe(err)})
				return err
			}
			if uint64(h.Length) == h.Aux {
				m.Done()
			} else {
				r.cur, r.curTag, r.curOff, r.curTotal = m, tag, uint64(h.Length), h.Aux
			}
		case wire.KindMore:
			if r.cur == nil || tag != r.curTag || h.Aux != r.curOff || r.curOff+uint64(h.Length) > r.curTotal {
				return r.protocolError("unexpected continuation frame (%v, offset %d, %d bytes)", tag, h.Aux, h.Length)
			}
			if err := r.payload(r.cur, int(h.Length)); err != nil {
				return err
			}
			r.curOff += uint64(h.Length)
			if r.curOff == r.curTotal {
				r.cur.Done()
				r.cur = nil
			}
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
			ack := wire.Header{Kind: wire.KindCloseAck}
			l.wmu.Lock()
			if l.down() == nil {
				ack.Put(l.stage)
				_, _ = l.conn.Write(l.stage[:wire.HeaderBytes])
			}
			l.wmu.Unlock()
			l.fail(errPeerClosed)
		case wire.KindCloseAck:
			l.ackOnce.Do(func() { close(l.closeAck) })
		default:
			return r.protocolError("unexpected %v frame", h.Kind)
		}
	}
}

// payload moves the next n payload bytes from the connection into m.
func (r *reader) payload(m *demux.Msg, n int) error {
	for n > 0 && r.r < r.w {
		k := min(n, r.w-r.r)
		src := r.buf[r.r : r.r+k]
		wrote, _ := m.Write(func(dst []byte) (int, error) { return copy(dst, src), nil })
		r.r += wrote
		n -= wrote
	}
	if n == 0 {
		return nil
	}
	r.r, r.w = 0, 0
	if n < directMin {
		if err := r.fill(n); err != nil {
			return noEOF(err)
		}
		return r.payload(m, n)
	}
	for n > 0 {
		var rerr error
		err := r.l.rc.Read(func(fd uintptr) bool {
			var k int
			k, rerr = m.Write(func(dst []byte) (int, error) {
				dst = dst[:min(len(dst), n)]
				for {
					k, err := unix.Read(int(fd), dst)
					if err == unix.EINTR {
						continue
					}
					if k < 0 {
						k = 0
					}
					return k, err
				}
			})
			if rerr == unix.EAGAIN {
				rerr = nil
				return false
			}
			if rerr == nil && k == 0 {
				rerr = io.ErrUnexpectedEOF
			}
			n -= k
			return true
		})
		if err != nil {
			return err
		}
		if rerr != nil {
			return rerr
		}
	}
	return nil
}

func noEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}
