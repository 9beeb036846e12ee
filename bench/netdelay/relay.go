package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

// Defaults of a Relay's sizes.
const (
	DefaultQueueBytes = 16 << 20
	DefaultChunkBytes = 64 << 10
	DefaultDialTime   = 10 * time.Second
)

// Relay forwards TCP connections to their destinations, each direction's
// bytes delayed by Delay. The zero value relays without delay to the
// original destination. A Relay's fields must not change while it serves.
type Relay struct {
	// Delay is the one-way delay added to every byte and half-close.
	Delay time.Duration
	// QueueBytes bounds the bytes of one direction read and not yet
	// written (0: DefaultQueueBytes); ChunkBytes is the most one read
	// takes (0: DefaultChunkBytes).
	QueueBytes, ChunkBytes int
	// Upstream is the address every connection is relayed to; "" relays
	// each to its original destination (SO_ORIGINAL_DST).
	Upstream string
	// DialTimeout bounds the dial of a destination (0: DefaultDialTime).
	DialTimeout time.Duration
	// Logf, if not nil, reports connections that end with an error.
	Logf func(format string, args ...any)
}

func (r *Relay) validate() error {
	if r.Delay < 0 || r.QueueBytes < 0 || r.ChunkBytes < 0 || r.DialTimeout < 0 {
		return fmt.Errorf("netdelay: negative delay %v, queue %d, chunk %d or dial timeout %v", r.Delay, r.QueueBytes, r.ChunkBytes, r.DialTimeout)
	}
	if r.QueueBytes > 0 && r.QueueBytes < r.chunkBytes() {
		return fmt.Errorf("netdelay: queue of %d bytes holds no chunk of %d", r.QueueBytes, r.chunkBytes())
	}
	return nil
}

func (r *Relay) chunkBytes() int {
	if r.ChunkBytes > 0 {
		return r.ChunkBytes
	}
	return DefaultChunkBytes
}

// slots is how many chunks a direction's queue holds.
func (r *Relay) slots() int {
	q := r.QueueBytes
	if q == 0 {
		q = DefaultQueueBytes
	}
	return max(1, q/r.chunkBytes())
}

func (r *Relay) logf(format string, args ...any) {
	if r.Logf != nil {
		r.Logf(format, args...)
	}
}

// Serve relays the connections ln accepts until ctx ends or ln fails; it
// then closes ln, ends every relayed connection and returns once all
// have ended. It returns nil when ctx ended.
func (r *Relay) Serve(ctx context.Context, ln net.Listener) error {
	if err := r.validate(); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			ln.Close()
			return fmt.Errorf("netdelay: accept: %w", err)
		}
		wg.Go(func() {
			if err := r.handle(ctx, c.(*net.TCPConn)); err != nil {
				r.logf("%v", err)
			}
		})
	}
}

// handle relays c to its destination and returns when both have closed.
func (r *Relay) handle(ctx context.Context, c *net.TCPConn) error {
	dst := r.Upstream
	if dst == "" {
		var err error
		if dst, err = originalDst(c); err != nil {
			c.Close()
			return fmt.Errorf("netdelay: connection from %s: %w", c.RemoteAddr(), err)
		}
		if dst == c.LocalAddr().String() {
			c.Close()
			return fmt.Errorf("netdelay: connection from %s was not redirected (its destination is the relay)", c.RemoteAddr())
		}
	}
	timeout := r.DialTimeout
	if timeout == 0 {
		timeout = DefaultDialTime
	}
	d := net.Dialer{Timeout: timeout}
	u, err := d.DialContext(ctx, "tcp", dst)
	if err != nil {
		// the peer sees a reset, as it would from a refused connection
		c.SetLinger(0)
		c.Close()
		return fmt.Errorf("netdelay: connection from %s: %w", c.RemoteAddr(), err)
	}
	return r.pipe(ctx, c, u.(*net.TCPConn))
}

// pipe relays a and b both ways, delayed, until both directions have
// ended (each by its reader's EOF, delivered as a half-close) or one has
// failed (then both connections are reset at once), or ctx ends. It
// closes a and b, and returns the first failure.
func (r *Relay) pipe(ctx context.Context, a, b *net.TCPConn) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var once sync.Once
	var first error
	abort := func(err error) {
		once.Do(func() {
			first = err
			a.SetLinger(0)
			b.SetLinger(0)
			a.Close()
			b.Close()
			cancel()
		})
	}
	stop := context.AfterFunc(ctx, func() { abort(nil) })
	var wg sync.WaitGroup
	for _, d := range []struct {
		src, dst *net.TCPConn
		name     string
	}{{a, b, fmt.Sprintf("%s→%s", a.RemoteAddr(), b.RemoteAddr())}, {b, a, fmt.Sprintf("%s→%s", b.RemoteAddr(), a.RemoteAddr())}} {
		wg.Go(func() {
			if err := r.direction(ctx, &wg, d.src, d.dst); err != nil && ctx.Err() == nil {
				abort(fmt.Errorf("netdelay: %s: %w", d.name, err))
			}
		})
	}
	wg.Wait()
	stop()
	a.Close()
	b.Close()
	return first
}

// chunk is bytes read at a time, or the reader's EOF (buf nil).
type chunk struct {
	buf []byte
	at  time.Time
}

// direction copies src to dst, each chunk written Delay after it was
// read, and half-closes dst Delay after src's EOF. It returns when it has
// done so, or on the first error. Its reader runs in wg; after an error
// the caller must end ctx and close src for the reader to stop.
func (r *Relay) direction(ctx context.Context, wg *sync.WaitGroup, src, dst *net.TCPConn) error {
	slots := r.slots()
	// Invariant: the chunks queued and being written hold at most slots
	// buffers, so queue (slots and the EOF) never fills and only free
	// blocks the reader.
	queue := make(chan chunk, slots+1)
	free := make(chan []byte, slots)
	var readErr error // set before queue is closed
	wg.Go(func() {
		defer close(queue)
		allocated := 0
		for {
			var buf []byte
			select {
			case buf = <-free:
			default:
				if allocated < slots {
					buf = make([]byte, r.chunkBytes())
					allocated++
				} else {
					select {
					case buf = <-free:
					case <-ctx.Done():
						return
					}
				}
			}
			n, err := src.Read(buf)
			at := time.Now()
			if n > 0 {
				queue <- chunk{buf: buf[:n], at: at}
			}
			if errors.Is(err, io.EOF) {
				queue <- chunk{at: at}
				return
			}
			if err != nil {
				readErr = fmt.Errorf("read: %w", err)
				return
			}
		}
	})
	timer := time.NewTimer(0)
	defer timer.Stop()
	<-timer.C
	for c := range queue {
		if wait := time.Until(c.at.Add(r.Delay)); wait > 0 {
			timer.Reset(wait)
			select {
			case <-timer.C:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		if c.buf == nil {
			if err := dst.CloseWrite(); err != nil {
				return fmt.Errorf("half-close: %w", err)
			}
			return nil
		}
		if _, err := dst.Write(c.buf); err != nil {
			return fmt.Errorf("write: %w", err)
		}
		free <- c.buf[:cap(c.buf)]
	}
	if readErr != nil {
		return readErr
	}
	return ctx.Err()
}
