package tcp

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	"cohort/dist/transport/internal/demux"
	"cohort/dist/transport/internal/handshake"
)

const protocolLabel = "cohort-tcp/1"

// Listener is the first half of setting up a transport: a listening socket
// whose address the caller publishes to the other ranks.
type Listener struct {
	rank, worldSize int
	opts            Options
	ln              *net.TCPListener
	mu              sync.Mutex
	used            bool
}

// Listen validates the arguments and starts listening on addr ("host:port";
// port 0 picks a free one). The host should be one the other ranks can
// reach: Addr reports the address as bound, and an unspecified host
// ("" or "0.0.0.0") is reported as such.
func Listen(ctx context.Context, rank, worldSize int, addr string, opts Options) (*Listener, error) {
	if worldSize < 1 {
		return nil, fmt.Errorf("tcp: world size %d, want >= 1", worldSize)
	}
	if rank < 0 || rank >= worldSize {
		return nil, fmt.Errorf("tcp: rank %d out of range [0, %d)", rank, worldSize)
	}
	if err := opts.validate(); err != nil {
		return nil, err
	}
	opts = opts.withDefaults()
	lc := net.ListenConfig{KeepAliveConfig: keepAliveConfig(&opts)}
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("tcp: rank %d: listen on %q: %w", rank, addr, err)
	}
	return &Listener{rank: rank, worldSize: worldSize, opts: opts, ln: ln.(*net.TCPListener)}, nil
}

func keepAliveConfig(o *Options) net.KeepAliveConfig {
	idle, interval, count := o.keepAlive()
	return net.KeepAliveConfig{Enable: true, Idle: idle, Interval: interval, Count: count}
}

// Addr returns the address to publish to the other ranks.
func (l *Listener) Addr() string { return l.ln.Addr().String() }

// Close stops listening; needed only if Connect is never called.
func (l *Listener) Close() error { return l.ln.Close() }

type linkResult struct {
	peer int
	conn *net.TCPConn
	err  error
}

// Connect connects to every other rank, given every rank's published
// address (peerAddrs[r] is rank r's; this rank's own entry is ignored),
// and returns the transport. This rank dials the lower ranks and accepts
// the higher ones. It fails, naming the missing ranks, if ctx ends first
// or a dial or handshake to a lower rank fails; refused incoming
// connections (wrong token, wrong world) are logged and waited past. The
// listener is closed when Connect returns.
func (l *Listener) Connect(ctx context.Context, peerAddrs []string) (*Transport, error) {
	l.mu.Lock()
	used := l.used
	l.used = true
	l.mu.Unlock()
	if used {
		return nil, fmt.Errorf("tcp: rank %d: Connect called twice on one listener", l.rank)
	}
	defer l.ln.Close()
	if len(peerAddrs) != l.worldSize {
		return nil, fmt.Errorf("tcp: rank %d: %d peer addresses for world size %d", l.rank, len(peerAddrs), l.worldSize)
	}
	for r := range l.rank {
		if peerAddrs[r] == "" {
			return nil, fmt.Errorf("tcp: rank %d: no address for rank %d", l.rank, r)
		}
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	results := make(chan linkResult, l.worldSize)
	var wg sync.WaitGroup

	cfg := handshake.Config{Label: protocolLabel, Token: l.opts.Token, Rank: l.rank, WorldSize: l.worldSize}
	var mu sync.Mutex
	accepted := make([]bool, l.worldSize)
	refusals := make(map[int]string) // last refusal per rank, for the timeout error
	if l.rank < l.worldSize-1 {
		wg.Go(func() {
			for {
				c, err := l.ln.AcceptTCP()
				if err != nil {
					return
				}
				wg.Go(func() {
					claimed := false
					peer, err := l.handshake(ctx, c, func(c *net.TCPConn) (int, error) {
						peer, _, err := handshake.Accept(c, cfg, func(r, connIdx int) error {
							mu.Lock()
							defer mu.Unlock()
							switch {
							case r <= l.rank:
								return fmt.Errorf("rank %d dialed rank %d, but lower ranks are dialed, not dialing", r, l.rank)
							case connIdx != 0:
								return fmt.Errorf("rank %d: connection index %d, want 0", r, connIdx)
							case accepted[r]:
								return fmt.Errorf("rank %d is already connected", r)
							}
							accepted[r] = true
							claimed = true
							return nil
						})
						return peer, err
					})
					if err != nil {
						l.opts.Logger.Warn("tcp: refused connection", "rank", l.rank, "remote", c.RemoteAddr().String(), "err", err)
						mu.Lock()
						if peer >= 0 && peer < l.worldSize {
							refusals[peer] = err.Error()
							if claimed {
								accepted[peer] = false // the check passed but the handshake failed later
							}
						}
						mu.Unlock()
						c.Close()
						return
					}
					results <- linkResult{peer: peer, conn: c}
				})
			}
		})
	}
	d := net.Dialer{KeepAliveConfig: keepAliveConfig(&l.opts)}
	for r := range l.rank {
		wg.Go(func() {
			nc, err := d.DialContext(ctx, "tcp", peerAddrs[r])
			if err != nil {
				results <- linkResult{peer: r, err: fmt.Errorf("dial rank %d at %s: %w", r, peerAddrs[r], err)}
				return
			}
			c := nc.(*net.TCPConn)
			_, err = l.handshake(ctx, c, func(c *net.TCPConn) (int, error) {
				return r, handshake.Dial(c, cfg, r, 0)
			})
			if err != nil {
				c.Close()
				results <- linkResult{peer: r, err: fmt.Errorf("rank %d at %s: %w", r, peerAddrs[r], err)}
				return
			}
			results <- linkResult{peer: r, conn: c}
		})
	}

	conns := make([]*net.TCPConn, l.worldSize)
	closeAll := func() {
		for _, c := range conns {
			if c != nil {
				c.Close()
			}
		}
	}
	var failure error
	for missing := l.worldSize - 1; missing > 0 && failure == nil; {
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
			for r, c := range conns {
				if c == nil && r != l.rank {
					s := fmt.Sprint(r)
					mu.Lock()
					if why, ok := refusals[r]; ok {
						s += " (refused: " + why + ")"
					}
					mu.Unlock()
					ranks = append(ranks, s)
				}
			}
			failure = fmt.Errorf("no connection with rank(s) %s: %w", strings.Join(ranks, ", "), context.Cause(ctx))
		}
	}
	// Stop accepting and wait for every setup goroutine.
	cancel()
	l.ln.Close()
	wg.Wait()
	if failure != nil {
		// Handshakes that finished meanwhile.
		for len(results) > 0 {
			if res := <-results; res.conn != nil {
				res.conn.Close()
			}
		}
		closeAll()
		return nil, fmt.Errorf("tcp: rank %d: connect: %w", l.rank, failure)
	}

	t := &Transport{rank: l.rank, size: l.worldSize, opts: l.opts, links: make([]*link, l.worldSize), self: demux.New()}
	for r, c := range conns {
		if c == nil {
			continue
		}
		c.SetNoDelay(true)
		lk, err := newLink(t, r, c)
		if err != nil {
			closeAll()
			return nil, fmt.Errorf("tcp: rank %d: connection to rank %d: %w", l.rank, r, err)
		}
		t.links[r] = lk
	}
	for _, lk := range t.links {
		if lk != nil {
			go lk.readLoop()
		}
	}
	return t, nil
}

// handshake runs hs on c with a deadline of HandshakeTimeout (and ctx's),
// interrupting it if ctx ends.
func (l *Listener) handshake(ctx context.Context, c *net.TCPConn, hs func(*net.TCPConn) (int, error)) (int, error) {
	deadline := time.Now().Add(l.opts.HandshakeTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	c.SetDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(aLongTimeAgo) })
	peer, err := hs(c)
	if !stop() {
		if err == nil {
			err = context.Cause(ctx)
		}
	}
	if err != nil {
		return peer, err
	}
	c.SetDeadline(time.Time{})
	return peer, nil
}
