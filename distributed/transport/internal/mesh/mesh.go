// Package mesh connects every pair of ranks with one authenticated stream
// connection: each rank dials the lower ranks and accepts the higher ones,
// running package handshake on every connection. It is the setup shared by
// the tcp and shm transports, which differ only in how they listen and
// dial. A rank may connect to a subset of the world (Config.Peers), as a
// transport that serves only some of the ranks does; the subsets must then
// be symmetric (a lists b exactly when b lists a).
package mesh

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cohortml/cohort/distributed/internal/admit"
	"github.com/cohortml/cohort/distributed/transport/internal/handshake"
)

// aLongTimeAgo is a deadline in the past, to interrupt a handshake.
var aLongTimeAgo = time.Unix(1, 0)

// Config describes this rank's side of the mesh.
type Config struct {
	Handshake handshake.Config // Rank and WorldSize come from here
	// Peers lists the ranks to connect with, ascending, without this
	// rank (see Peers); nil means every other rank of the world.
	Peers []int
	// Listener accepts the higher ranks; Connect closes it before
	// returning. Nil only when no peer ranks above this one.
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

// Once marks a listener used: its Connect (or, for shm, its Close) may
// run once. The zero value is unused.
type Once struct {
	mu   sync.Mutex
	used bool
}

// Use marks it used and reports whether it was unused until then.
func (o *Once) Use() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	first := !o.used
	o.used = true
	return first
}

// CheckListen checks the arguments of a transport's Listen, in this
// order: worldSize >= 1, rank in [0, worldSize), validate (the
// transport's own options), then the peer list peers (see Peers), which
// it returns checked. Its errors start with name ("tcp: …").
func CheckListen(name string, rank, worldSize int, validate func() error, peers []int) ([]int, error) {
	if worldSize < 1 {
		return nil, fmt.Errorf("%s: world size %d, want >= 1", name, worldSize)
	}
	if rank < 0 || rank >= worldSize {
		return nil, fmt.Errorf("%s: rank %d out of range [0, %d)", name, rank, worldSize)
	}
	if err := validate(); err != nil {
		return nil, err
	}
	ps, err := Peers(rank, worldSize, peers)
	if err != nil {
		return nil, fmt.Errorf("%s: rank %d: Options.Peers: %w", name, rank, err)
	}
	return ps, nil
}

// Peers validates a peer list given for rank in a world of worldSize and
// returns it sorted (a copy): nil stands for every other rank, and an
// empty list for none. A rank out of range, this rank itself or a
// duplicate is an error naming it.
func Peers(rank, worldSize int, peers []int) ([]int, error) {
	if peers == nil {
		all := make([]int, 0, max(worldSize-1, 0))
		for r := range worldSize {
			if r != rank {
				all = append(all, r)
			}
		}
		return all, nil
	}
	out := slices.Clone(peers)
	slices.Sort(out)
	for i, r := range out {
		switch {
		case r < 0 || r >= worldSize:
			return nil, fmt.Errorf("peer rank %d out of range [0, %d)", r, worldSize)
		case r == rank:
			return nil, fmt.Errorf("lists rank %d, this rank itself", r)
		case i > 0 && out[i-1] == r:
			return nil, fmt.Errorf("lists rank %d twice", r)
		}
	}
	return out, nil
}

// Connect returns conns[r], the connection to rank r (nil at this rank and
// at ranks not in Config.Peers). It fails, naming the missing ranks, if
// ctx ends first or a dial or handshake to a lower rank fails; refused
// incoming connections (wrong token, wrong world, duplicates, ranks that
// are not peers) are logged and waited past, and their reasons are
// reported if the wait ends in failure.
func Connect(ctx context.Context, cfg Config) ([]net.Conn, error) {
	rank, world := cfg.Handshake.Rank, cfg.Handshake.WorldSize
	peers, err := Peers(rank, world, cfg.Peers)
	if err != nil {
		return nil, fmt.Errorf("%s: rank %d: connect: %w", cfg.Name, rank, err)
	}
	isPeer := make([]bool, world)
	for _, r := range peers {
		isPeer[r] = true
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	results := make(chan result, world)
	var wg sync.WaitGroup

	var mu sync.Mutex
	accepted := make([]bool, world)
	refusals := make(map[int]string) // last refusal per rank
	// Connections still in the handshake are capped (the oldest closed to
	// make room), and refusals logged a few lines at a time: a flood of
	// connections that never authenticate cannot exhaust descriptors,
	// flood the log or keep a peer out.
	gate := admit.New(admit.Options{})
	var warns admit.Limiter
	if cfg.Listener != nil {
		wg.Go(func() {
			for {
				c, err := cfg.Listener.Accept()
				if err != nil {
					if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
						return
					}
					// Out of descriptors and the like: wait a little, retry.
					select {
					case <-ctx.Done():
						return
					case <-time.After(10 * time.Millisecond):
					}
					continue
				}
				admitted := gate.Admit(c)
				wg.Go(func() {
					claimed := false
					var peer int
					err := guard(ctx, c, cfg.HandshakeTimeout, func() error {
						var err error
						// The slot is claimed only after authentication, so
						// a connection that says hello as rank r and stalls
						// (or holds no token) never evicts the real rank r.
						check := func(r, connIdx int) error {
							switch {
							case r <= rank:
								return fmt.Errorf("rank %d dialed rank %d, but only higher ranks dial", r, rank)
							case !isPeer[r]:
								return fmt.Errorf("rank %d dialed rank %d, which does not count it among its peers", r, rank)
							case connIdx != 0:
								return fmt.Errorf("rank %d: connection index %d, want 0", r, connIdx)
							}
							return nil
						}
						claim := func(r, _ int) error {
							// Leave the gate before the ready frame: an
							// accepted connection is never evicted.
							if admitted() {
								return errors.New("closed to make room for newer connections")
							}
							mu.Lock()
							defer mu.Unlock()
							if accepted[r] {
								return fmt.Errorf("rank %d is already connected", r)
							}
							accepted[r] = true
							claimed = true
							return nil
						}
						peer, _, err = handshake.Accept(c, cfg.Handshake, check, claim)
						return err
					})
					admitted()
					if err != nil {
						if ok, suppressed := warns.Allow(time.Now()); ok {
							cfg.Logger.Warn(cfg.Name+": refused connection", "rank", rank, "remote", c.RemoteAddr().String(), "err", err,
								"suppressed_since_last", suppressed)
						}
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
	for _, r := range peers {
		if r > rank {
			break
		}
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
	for missing := len(peers); missing > 0 && failure == nil; {
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
			for _, r := range peers {
				if conns[r] == nil {
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
