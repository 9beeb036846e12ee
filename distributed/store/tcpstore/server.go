package tcpstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/cohortml/cohort/distributed/internal/admit"
	"github.com/cohortml/cohort/distributed/store"
	"github.com/cohortml/cohort/distributed/store/memstore"
)

// Server serves one in-memory store to authenticated clients. Blocking
// Get and Wait requests park on the store's per-key channels (one
// goroutine each, owned by the connection, nothing polls); Set, Add,
// CompareAndSwap and Delete are applied in arrival order on the
// connection's reader, so they are atomic and ordered per connection.
//
// A Server owns its goroutines: Close stops them all before returning.
type Server struct {
	ln   net.Listener
	opts Options
	log  *slog.Logger
	mem  *memstore.Store
	// gate bounds the connections still in the handshake; warns
	// rate-limits the log lines that outsiders can cause.
	gate  *admit.Gate
	warns admit.Limiter

	mu      sync.Mutex
	closing bool
	conns   map[*serverConn]struct{}
	done    chan struct{}  // closed by Close
	wg      sync.WaitGroup // accept loop and connection handlers
}

// Listen listens on addr ("host:port"; port 0 picks a free one) and
// serves the store there.
func Listen(addr string, opts Options) (*Server, error) {
	if _, err := opts.withDefaults(); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("tcpstore: listen on %s: %w", addr, err)
	}
	s, err := NewServer(ln, opts)
	if err != nil {
		ln.Close()
		return nil, err
	}
	return s, nil
}

// NewServer serves the store on ln, which the Server owns from now on.
func NewServer(ln net.Listener, opts Options) (*Server, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	s := &Server{
		ln:    ln,
		opts:  o,
		log:   o.Logger,
		mem:   memstore.New(),
		conns: make(map[*serverConn]struct{}),
		done:  make(chan struct{}),
		gate:  admit.New(admit.Options{MaxPending: o.MaxPendingConns, MaxPerSource: o.MaxPendingPerSource}),
	}
	if o.Token == "" {
		s.log.Warn("tcpstore: serving without a token: any process that can reach " + ln.Addr().String() +
			" can join this job's store; set the same COHORT_TOKEN for every rank (cohort run generates one)")
	}
	s.wg.Add(1)
	go s.acceptLoop()
	return s, nil
}

// Addr is the address the server listens on.
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// Close stops accepting, fails every blocked request with store.ErrClosed
// (clients see an error wrapping it), tells each client the server is
// gone, closes every connection and waits for the server's goroutines.
// It is idempotent.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		s.wg.Wait()
		return nil
	}
	s.closing = true
	close(s.done)
	conns := make([]*serverConn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()

	err := s.ln.Close()
	s.mem.Close()
	for _, c := range conns {
		c.conn.SetReadDeadline(time.Now()) // stops the reader; see setReadDeadline
	}
	s.wg.Wait()
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return err
}

// warn logs what outsiders can cause (refusals, failed handshakes, accept
// errors) at most a few lines per interval, with a count of those left out.
func (s *Server) warn(msg string, args ...any) {
	ok, suppressed := s.warns.Allow(time.Now())
	if !ok {
		return
	}
	if suppressed > 0 {
		args = append(args, "suppressed_since_last", suppressed)
	}
	s.log.Warn(msg, args...)
}

func (s *Server) isClosing() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closing
}

func (s *Server) acceptLoop() {
	defer s.wg.Done()
	backoff := 5 * time.Millisecond
	for {
		conn, err := s.ln.Accept()
		if err != nil {
			if s.isClosing() || errors.Is(err, net.ErrClosed) {
				return
			}
			// Out of file descriptors and the like: log, back off, retry.
			s.warn("tcpstore: accept failed", "addr", s.ln.Addr().String(), "err", err, "retry_in", backoff)
			t := time.NewTimer(backoff)
			select {
			case <-t.C:
			case <-s.done:
				t.Stop()
				return
			}
			backoff = min(2*backoff, time.Second)
			continue
		}
		backoff = 5 * time.Millisecond
		c := &serverConn{s: s, conn: conn, remote: conn.RemoteAddr().String(), blocked: make(map[uint64]context.CancelFunc),
			admitted: s.gate.Admit(conn)}
		c.ctx, c.cancel = context.WithCancel(context.Background())
		s.mu.Lock()
		if s.closing {
			s.mu.Unlock()
			c.cancel()
			conn.Close()
			return
		}
		s.conns[c] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go c.serve()
	}
}

// serverConn is one client connection.
type serverConn struct {
	s      *Server
	conn   net.Conn
	remote string
	ctx    context.Context // cancelled when the client goes away
	cancel context.CancelFunc
	// admitted ends the connection's pending state at the gate; it
	// reports whether the gate closed the connection to make room.
	admitted func() (evicted bool)

	wmu sync.Mutex // serialises writes

	mu      sync.Mutex
	blocked map[uint64]context.CancelFunc // in-flight Get/Wait by request id
	reqs    sync.WaitGroup                // goroutines serving blocked requests
}

// setReadDeadline sets the read deadline unless the server is closing, in
// which case it makes reads fail now (Close may have run before us).
func (c *serverConn) setReadDeadline(t time.Time) {
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	if c.s.closing {
		t = time.Now()
	}
	c.conn.SetReadDeadline(t)
}

func (c *serverConn) serve() {
	s := c.s
	defer s.wg.Done()
	defer func() {
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
		c.conn.Close()
	}()

	c.setReadDeadline(time.Now().Add(s.opts.HandshakeTimeout))
	c.conn.SetWriteDeadline(time.Now().Add(s.opts.HandshakeTimeout))
	// The connection leaves the gate's pending set right before the
	// acceptance is sent, or here when the handshake ends otherwise.
	refused, reason, err := serverHandshake(c.conn, s.opts.Token, c.admitted)
	evicted := c.admitted()
	switch {
	case refused:
		// Log first: when the client hears of the refusal the line exists.
		s.warn("tcpstore: refused connection", "remote", c.remote, "reason", reason)
		writeRefusal(c.conn, reason)
		c.cancel()
		return
	case err != nil:
		if !s.isClosing() {
			if evicted {
				err = fmt.Errorf("closed to make room for newer connections (%d still in the handshake): %w", s.gate.Pending(), err)
			}
			s.warn("tcpstore: handshake failed", "remote", c.remote, "err", err)
		}
		c.cancel()
		return
	}
	c.setReadDeadline(time.Time{})
	c.conn.SetWriteDeadline(time.Time{})
	s.log.Debug("tcpstore: client connected", "remote", c.remote)

	err = c.readLoop()
	if s.isClosing() {
		// Blocked requests were woken by the store closing and are
		// replying with statusClosed; let them finish, then say goodbye.
		c.reqs.Wait()
		c.cancel()
		c.write(encodeResponse(&response{op: opGoodbye, status: statusClosed}))
		return
	}
	c.cancel()
	c.reqs.Wait()
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
		s.log.Warn("tcpstore: dropped connection", "remote", c.remote, "err", err)
	} else {
		s.log.Debug("tcpstore: client disconnected", "remote", c.remote)
	}
}

func (c *serverConn) readLoop() error {
	for {
		p, err := readFrame(c.conn, c.s.opts.MaxFrameBytes)
		if err != nil {
			return err
		}
		req, err := decodeRequest(p)
		if err != nil {
			return err
		}
		if err := c.dispatch(req); err != nil {
			return err
		}
	}
}

// dispatch applies req. It returns an error only for protocol violations,
// which end the connection.
func (c *serverConn) dispatch(req *request) error {
	mem := c.s.mem
	ctx := c.ctx
	resp := &response{op: req.op, id: req.id}
	var err error
	switch req.op {
	case opSet:
		err = mem.Set(ctx, req.key, req.value)
	case opAdd:
		resp.n, err = mem.Add(ctx, req.key, req.delta)
	case opCAS:
		expected := req.expected
		if !req.hasExpected {
			expected = nil
		} else if expected == nil {
			expected = []byte{}
		}
		resp.value, err = mem.CompareAndSwap(ctx, req.key, expected, req.value)
		resp.present = resp.value != nil
	case opDelete:
		resp.existed, err = mem.Delete(ctx, req.key)
	case opCheck:
		resp.keys, err = c.missing(req.keys)
	case opGet, opWait:
		return c.startBlocked(req)
	case opCancel:
		c.mu.Lock()
		cancel := c.blocked[req.id]
		c.mu.Unlock()
		if cancel != nil {
			cancel()
		}
		return nil
	default:
		return fmt.Errorf("unexpected request op %d", req.op)
	}
	c.reply(resp, err, ctx)
	return nil
}

// missing reports which keys are not set, without blocking.
func (c *serverConn) missing(keys []string) ([]string, error) {
	ctx, cancel := context.WithCancel(c.ctx)
	cancel() // Wait on a done context reports, never blocks
	var m []string
	for _, k := range keys {
		err := c.s.mem.Wait(ctx, k)
		switch {
		case err == nil:
		case errors.Is(err, store.ErrClosed):
			return nil, err
		default:
			m = append(m, k)
		}
	}
	return m, nil
}

// startBlocked serves a Get or Wait in its own goroutine so the reader
// keeps going; the request is cancelled by an opCancel with its id or
// when the connection ends.
func (c *serverConn) startBlocked(req *request) error {
	c.mu.Lock()
	if _, dup := c.blocked[req.id]; dup {
		c.mu.Unlock()
		return fmt.Errorf("request id %d reused while still in flight", req.id)
	}
	if len(c.blocked) >= c.s.opts.MaxBlockedPerConn {
		c.mu.Unlock()
		c.reply(&response{op: req.op, id: req.id}, fmt.Errorf("tcpstore: %d blocked requests on this connection already (Options.MaxBlockedPerConn)", c.s.opts.MaxBlockedPerConn), c.ctx)
		return nil
	}
	ctx, cancel := context.WithCancel(c.ctx)
	c.blocked[req.id] = cancel
	c.reqs.Add(1)
	c.mu.Unlock()
	go func() {
		defer c.reqs.Done()
		defer func() {
			c.mu.Lock()
			delete(c.blocked, req.id)
			c.mu.Unlock()
			cancel()
		}()
		resp := &response{op: req.op, id: req.id}
		var err error
		if req.op == opGet {
			resp.value, err = c.s.mem.Get(ctx, req.key)
		} else {
			err = c.s.mem.Wait(ctx, req.keys...)
		}
		c.reply(resp, err, ctx)
	}()
	return nil
}

// reply sends resp, or the error err turned into a status. A request whose
// ctx ended (cancelled by the client, or the client is gone) gets no reply.
func (c *serverConn) reply(resp *response, err error, ctx context.Context) {
	switch {
	case err == nil:
		resp.status = statusOK
	case errors.Is(err, store.ErrClosed):
		resp.status = statusClosed
	case ctx.Err() != nil:
		return
	default:
		resp.status, resp.msg = statusError, strings.TrimPrefix(err.Error(), "memstore: ")
	}
	if err := c.write(encodeResponse(resp)); err != nil {
		// The client stopped reading: drop it. The reader notices.
		c.conn.Close()
	}
}

// write sends one frame, bounded by WriteTimeout, or by a second while the
// server is closing so that a client that stopped reading cannot hold up
// Close.
func (c *serverConn) write(frame []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	timeout := c.s.opts.WriteTimeout
	if c.s.isClosing() {
		timeout = min(timeout, time.Second)
	}
	c.conn.SetWriteDeadline(time.Now().Add(timeout))
	_, err := c.conn.Write(frame)
	return err
}
