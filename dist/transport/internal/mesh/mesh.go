// Package mesh connects every pair of ranks with one authenticated stream
// connection: each rank dials the lower ranks and accepts the higher ones,
// running package handshake on every connection. It is the setup shared by
// the tcp and shm transports, which differ only in how they listen and
// dial.
package mesh

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"time"

	"cohort/dist/transport/internal/handshake"
)

// aLongTimeAgo is a deadline in the past, to interrupt a handshake.
var aLongTimeAgo = time.Unix(1, 0)

// Config describes this rank's side of the mesh.
type Config struct {
	Handshake handshake.Config // Rank and WorldSize come from here
	// Listener accepts the higher ranks; Connect closes it before
	// returning. Nil only for the highest rank.
	Listener net.Listener
	// Dial connects to the lower rank peer.
	Dial func(ctx context.Context, peer int) (net.Conn, error)
	// HandshakeTimeout bounds each connection's handshake.
	HandshakeTimeout time.Duration
	// Logger receives refused connections.
	Logger *slog.Logger
	// Name prefixes errors ("tcp", "shm").
	Name string
}

type result struct {
	peer int
	conn net.Conn
	err  error
}

// Connect returns conns[r], the connection to rank r (nil at this rank). It
// fails, naming the missing ranks, if ctx ends first or a dial or
// handshake to a lower rank fails; refused incoming connections (wrong
// token, wrong world, duplicates) are logged and waited past, and their
// reasons are reported if the wait ends in failure.
func Connect(ctx context.Context, cfg Config) ([]net.Conn, error) {
	rank, world := cfg.Handshake.Rank, cfg.Handshake.WorldSize
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	results := make(chan result, world)
	var wg sync.WaitGroup

	var mu sync.Mutex
	accepted := make([]bool, world)
	refusals := make(map[int]string) // last refusal per rank
	if cfg.Listener != nil {
		wg.Go(func() {
			for {
				c, err := cfg.Listener.Accept()
				if err != nil {
					return
				}
				wg.Go(func() {
					claimed := false
					var peer int
					err := guard(ctx, c, cfg.HandshakeTimeout, func() error {
						var err error
						peer, _, err = handshake.Accept(c, cfg.Handshake, func(r, connIdx int) error {
							mu.Lock()
							defer mu.Unlock()
							switch {
							case r <= rank:
								return fmt.Errorf("rank %d dialed rank %d, but only higher ranks dial", r, rank)
							case connIdx != 0:
								return fmt.Errorf("rank %d: connection index %d, want 0", r, connIdx)
							case accepted[r]:
								return fmt.Errorf("rank %d is already connected", r)
							}
							accepted[r] = true
							claimed = true
							return nil
						})
						return err
					})
					if err != nil {
						cfg.Logger.Warn(cfg.Name+": refused connection", "rank", rank, "remote", c.RemoteAddr().String(), "err", err)
						mu.Lock()
						if peer >= 0 && peer < world {
							refusals[peer] = err.Error()
							if claimed {
								accepted[peer] = false
							}
						}
						mu.Unlock()
						c.Close()
						return
					}
					results <- result{peer: peer, conn: c}
				})
			}
		})
	}
	for r := range rank {
		wg.Go(func() {
			c, err := cfg.Dial(ctx, r)
			if err != nil {
				results <- result{peer: r, err: fmt.Errorf("dial rank %d: %w", r, err)}
				return
			}
			err = guard(ctx, c, cfg.HandshakeTimeout, func() error { return handshake.Dial(c, cfg.Handshake, r, 0) })
			if err != nil {
				c.Close()
				results <- result{peer: r, err: fmt.Errorf("rank %d: %w", r, err)}
				return
			}
			results <- result{peer: r, conn: c}
		})
	}

	conns := make([]net.Conn, world)
	var failure error
	for missing := world - 1; missing > 0 && failure == nil; {
		select {
		case res := <-results:
			if res.err != nil {
				failure = res.err
				break
			}
			conns[res.peer] = res.conn
			missing--
		case <-ctx.Done():
			var ranks []string
			mu.Lock()
			for r, c := range conns {
				if c == nil && r != rank {
					s := fmt.Sprint(r)
					if why, ok := refusals[r]; ok {
						s += " (refused: " + why + ")"
					}
					ranks = append(ranks, s)
				}
			}
			mu.Unlock()
			failure = fmt.Errorf("no connection with rank(s) %s: %w", strings.Join(ranks, ", "), context.Cause(ctx))
		}
	}
	// Stop accepting and wait for every setup goroutine.
	cancel()
	if cfg.Listener != nil {
		cfg.Listener.Close()
	}
	wg.Wait()
	if failure != nil {
		for len(results) > 0 {
			if res := <-results; res.conn != nil {
				res.conn.Close()
			}
		}
		for _, c := range conns {
			if c != nil {
				c.Close()
			}
		}
		return nil, fmt.Errorf("%s: rank %d: connect: %w", cfg.Name, rank, failure)
	}
	return conns, nil
}

// guard runs hs with c's deadline set to timeout (or ctx's deadline if
// sooner) and interrupts it if ctx ends; it clears the deadline after a
// success.
func guard(ctx context.Context, c net.Conn, timeout time.Duration, hs func() error) error {
	deadline := time.Now().Add(timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	c.SetDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(aLongTimeAgo) })
	err := hs()
	if !stop() && err == nil {
		err = context.Cause(ctx)
	}
	if err != nil {
		return err
	}
	return c.SetDeadline(time.Time{})
}
