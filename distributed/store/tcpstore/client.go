package tcpstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cohortml/cohort/distributed/store"
)

var _ store.Store = (*Client)(nil)

// Client is a connection to a Server. It implements store.Store; any
// number of goroutines may share one Client: every request carries an id
// and replies are matched to callers by id, so a blocked Get does not hold
// up other calls.
//
// When a call's context ends the call returns at once; a blocked Get or
// Wait is also withdrawn on the server. A Set, Add, CompareAndSwap or
// Delete whose context ends after it was sent may or may not have been
// applied.
//
// A lost connection fails every pending and later call with an error
// naming the server; the Client does not reconnect. Close the Client and
// Dial again.
type Client struct {
	conn net.Conn
	addr string
	opts Options

	wmu sync.Mutex // serialises writes

	mu      sync.Mutex
	nextID  uint64
	pending map[uint64]*call
	err     error         // why the client stopped; set once
	done    chan struct{} // closed when err is set

	readerDone chan struct{}
}

type call struct {
	op byte
	ch chan *response // buffered 1
}

// Dial connects to the server at addr and authenticates with opts.Token.
// It fails fast if the server is unreachable (callers wanting to wait
// for a server to come up retry; see package rendezvous). An error from a
// refused token wraps ErrAuth.
func Dial(ctx context.Context, addr string, opts Options) (*Client, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("tcpstore: dial %s: %w", addr, err)
	}
	deadline := time.Now().Add(o.HandshakeTimeout)
	if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
		deadline = dl
	}
	conn.SetDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Now()) })
	err = clientHandshake(conn, o.Token)
	stop()
	if err != nil {
		conn.Close()
		if ctx.Err() != nil && !errors.Is(err, ErrAuth) {
			err = ctx.Err()
		}
		return nil, fmt.Errorf("tcpstore: connect to %s: %w", addr, err)
	}
	conn.SetDeadline(time.Time{})
	c := &Client{
		conn:       conn,
		addr:       addr,
		opts:       o,
		pending:    make(map[uint64]*call),
		done:       make(chan struct{}),
		readerDone: make(chan struct{}),
	}
	go c.readLoop()
	return c, nil
}

// Addr is the server address the client was dialled with.
func (c *Client) Addr() string { return c.addr }

// stop records why the client stopped (first reason wins), wakes every
// pending call and closes the connection.
func (c *Client) stop(err error) {
	c.mu.Lock()
	if c.err == nil {
		c.err = err
		close(c.done)
	}
	c.mu.Unlock()
	c.conn.Close()
}

func (c *Client) readLoop() {
	defer close(c.readerDone)
	for {
		p, err := readFrame(c.conn, c.opts.MaxFrameBytes)
		if err != nil {
			c.stop(fmt.Errorf("connection to server %s lost: %w", c.addr, err))
			return
		}
		resp, err := decodeResponse(p)
		if err != nil {
			c.stop(fmt.Errorf("protocol error from server %s: %w", c.addr, err))
			return
		}
		if resp.op == opGoodbye {
			c.stop(fmt.Errorf("server %s closed: %w", c.addr, store.ErrClosed))
			return
		}
		c.mu.Lock()
		pc := c.pending[resp.id]
		delete(c.pending, resp.id)
		c.mu.Unlock()
		if pc == nil {
			continue // the caller gave up; the reply is moot
		}
		if pc.op != resp.op {
			c.stop(fmt.Errorf("protocol error from server %s: reply %d is for %s, request was %s", c.addr, resp.id, opName(resp.op), opName(pc.op)))
			return
		}
		pc.ch <- resp
	}
}

// Close closes the connection; pending and later calls fail with an error
// wrapping store.ErrClosed. It is idempotent.
func (c *Client) Close() error {
	c.stop(fmt.Errorf("client closed: %w", store.ErrClosed))
	<-c.readerDone
	return nil
}

// roundTrip sends req and waits for its reply. It returns an error (not
// prefixed) when no reply came; a reply with an error status is returned
// as is.
func (c *Client) roundTrip(ctx context.Context, req *request) (*response, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	pc := &call{op: req.op, ch: make(chan *response, 1)}
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return nil, err
	}
	c.nextID++
	req.id = c.nextID
	c.pending[req.id] = pc
	c.mu.Unlock()

	frame := encodeRequest(req)
	if int64(len(frame)-frameHeaderBytes) > c.opts.MaxFrameBytes {
		c.forget(req.id)
		return nil, fmt.Errorf("request of %d bytes exceeds the frame limit of %d bytes (Options.MaxFrameBytes)", len(frame)-frameHeaderBytes, c.opts.MaxFrameBytes)
	}
	if err := c.write(ctx, frame); err != nil {
		c.forget(req.id)
		return nil, err
	}
	select {
	case resp := <-pc.ch:
		return resp, nil
	case <-c.done:
		c.forget(req.id)
		// A reply may have raced with the shutdown.
		select {
		case resp := <-pc.ch:
			return resp, nil
		default:
		}
		return nil, c.err
	case <-ctx.Done():
		c.forget(req.id)
		if req.op == opGet || req.op == opWait {
			// Withdraw the parked request on the server; best effort.
			c.write(context.Background(), encodeRequest(&request{op: opCancel, id: req.id}))
		}
		return nil, ctx.Err()
	}
}

func (c *Client) forget(id uint64) {
	c.mu.Lock()
	delete(c.pending, id)
	c.mu.Unlock()
}

// write sends one frame, bounded by ctx's deadline and Options.WriteTimeout.
// A frame cut short breaks the stream, so the client stops.
func (c *Client) write(ctx context.Context, frame []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	select {
	case <-c.done:
		return c.err
	default:
	}
	deadline := time.Now().Add(c.opts.WriteTimeout)
	if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
		deadline = dl
	}
	c.conn.SetWriteDeadline(deadline)
	n, err := c.conn.Write(frame)
	if err == nil {
		return nil
	}
	if n == 0 && ctx.Err() != nil {
		return ctx.Err()
	}
	err = fmt.Errorf("sending to server %s: %w", c.addr, err)
	c.stop(err)
	return err
}

// result turns a reply's status into an error for op on what.
func (c *Client) result(op, what string, resp *response, err error) error {
	if err != nil {
		return fmt.Errorf("tcpstore: %s %s: %w", op, what, err)
	}
	switch resp.status {
	case statusOK:
		return nil
	case statusClosed:
		return fmt.Errorf("tcpstore: %s %s: server %s closed: %w", op, what, c.addr, store.ErrClosed)
	default:
		// The server's message names the operation and the key.
		return fmt.Errorf("tcpstore: server %s: %s", c.addr, sanitizeLong(resp.msg))
	}
}

// Set stores value under key.
func (c *Client) Set(ctx context.Context, key string, value []byte) error {
	resp, err := c.roundTrip(ctx, &request{op: opSet, key: key, value: value})
	return c.result("set", strconv.Quote(key), resp, err)
}

// Get returns the value under key, blocking until it is set.
func (c *Client) Get(ctx context.Context, key string) ([]byte, error) {
	resp, err := c.roundTrip(ctx, &request{op: opGet, key: key})
	if err := c.result("get", strconv.Quote(key), resp, err); err != nil {
		return nil, err
	}
	if resp.value == nil {
		resp.value = []byte{}
	}
	return resp.value, nil
}

// Add adds delta to the integer under key and returns the new value.
func (c *Client) Add(ctx context.Context, key string, delta int64) (int64, error) {
	resp, err := c.roundTrip(ctx, &request{op: opAdd, key: key, delta: delta})
	if err := c.result("add", strconv.Quote(key), resp, err); err != nil {
		return 0, err
	}
	return resp.n, nil
}

// CompareAndSwap sets key to desired if its value equals expected (nil:
// absent) and returns the value stored afterwards (nil: absent).
func (c *Client) CompareAndSwap(ctx context.Context, key string, expected, desired []byte) ([]byte, error) {
	resp, err := c.roundTrip(ctx, &request{op: opCAS, key: key, hasExpected: expected != nil, expected: expected, value: desired})
	if err := c.result("compare-and-swap", strconv.Quote(key), resp, err); err != nil {
		return nil, err
	}
	if !resp.present {
		return nil, nil
	}
	if resp.value == nil {
		resp.value = []byte{}
	}
	return resp.value, nil
}

// Wait blocks until every key is set. When ctx ends, the error names the
// keys still missing (asked of the server with a short, separate timeout).
func (c *Client) Wait(ctx context.Context, keys ...string) error {
	if len(keys) == 0 {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("tcpstore: wait: %w", err)
		}
		return nil
	}
	resp, err := c.roundTrip(ctx, &request{op: opWait, keys: keys})
	if err != nil && ctx.Err() != nil {
		return fmt.Errorf("tcpstore: wait: %s not set: %w", store.KeyList(c.stillMissing(keys)), err)
	}
	return c.result("wait for", store.KeyList(keys), resp, err)
}

// stillMissing asks the server which keys are unset; on any failure it
// returns all of them.
func (c *Client) stillMissing(keys []string) []string {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	resp, err := c.roundTrip(ctx, &request{op: opCheck, keys: keys})
	if err != nil || resp.status != statusOK {
		return keys
	}
	return resp.keys
}

// Delete removes key and reports whether it was set.
func (c *Client) Delete(ctx context.Context, key string) (bool, error) {
	resp, err := c.roundTrip(ctx, &request{op: opDelete, key: key})
	if err := c.result("delete", strconv.Quote(key), resp, err); err != nil {
		return false, err
	}
	return resp.existed, nil
}

// sanitizeLong keeps a server-supplied error message printable and bounded.
func sanitizeLong(msg string) string {
	const max = 512
	b := []byte(msg)
	if len(b) > max {
		b = append(bytes.Clone(b[:max]), "…"...)
	}
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return '?'
		}
		return r
	}, string(b))
}
