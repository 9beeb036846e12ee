package tcp

import (
	"context"
	"fmt"
	"net"

	"github.com/cohortml/cohort/distributed/transport/internal/demux"
	"github.com/cohortml/cohort/distributed/transport/internal/handshake"
	"github.com/cohortml/cohort/distributed/transport/internal/mesh"
)

const protocolLabel = "cohort-tcp/1"

// Listener is the first half of setting up a transport: a listening socket
// whose address the caller publishes to the other ranks.
type Listener struct {
	rank, worldSize int
	opts            Options
	peers           []int // ascending
	ln              *net.TCPListener
	once            mesh.Once
}

// Listen validates the arguments and starts listening on addr ("host:port";
// port 0 picks a free one). The host should be one the other ranks can
// reach: Addr reports the address as bound, and an unspecified host
// ("" or "0.0.0.0") is reported as such.
func Listen(ctx context.Context, rank, worldSize int, addr string, opts Options) (*Listener, error) {
	peers, err := mesh.CheckListen("tcp", rank, worldSize, opts.validate, opts.Peers)
	if err != nil {
		return nil, err
	}
	opts = opts.withDefaults()
	lc := net.ListenConfig{KeepAliveConfig: keepAliveConfig(&opts)}
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("tcp: rank %d: listen on %q: %w", rank, addr, err)
	}
	return &Listener{rank: rank, worldSize: worldSize, opts: opts, peers: peers, ln: ln.(*net.TCPListener)}, nil
}

func keepAliveConfig(o *Options) net.KeepAliveConfig {
	idle, interval, count := o.keepAlive()
	return net.KeepAliveConfig{Enable: true, Idle: idle, Interval: interval, Count: count}
}

// Addr returns the address to publish to the other ranks.
func (l *Listener) Addr() string { return l.ln.Addr().String() }

// Close stops listening; needed only if Connect is never called.
func (l *Listener) Close() error { return l.ln.Close() }

// Connect connects to every peer (every other rank unless Options.Peers
// says otherwise), given every rank's published address (peerAddrs[r] is
// rank r's; the entries of this rank and of ranks that are not peers are
// ignored), and returns the transport. This rank dials the lower peers
// and accepts the higher ones. It fails, naming the missing ranks, if ctx ends first
// or a dial or handshake to a lower rank fails; refused incoming
// connections (wrong token, wrong world) are logged and waited past. The
// listener is closed when Connect returns.
func (l *Listener) Connect(ctx context.Context, peerAddrs []string) (*Transport, error) {
	if !l.once.Use() {
		return nil, fmt.Errorf("tcp: rank %d: Connect called twice on one listener", l.rank)
	}
	defer l.ln.Close()
	if len(peerAddrs) != l.worldSize {
		return nil, fmt.Errorf("tcp: rank %d: %d peer addresses for world size %d", l.rank, len(peerAddrs), l.worldSize)
	}
	for _, r := range l.peers {
		if r > l.rank {
			break
		}
		if peerAddrs[r] == "" {
			return nil, fmt.Errorf("tcp: rank %d: no address for rank %d", l.rank, r)
		}
	}

	d := net.Dialer{KeepAliveConfig: keepAliveConfig(&l.opts)}
	conns, err := mesh.Connect(ctx, mesh.Config{
		Handshake: handshake.Config{Label: protocolLabel, Token: l.opts.Token, Rank: l.rank, WorldSize: l.worldSize},
		Peers:     l.peers,
		Listener:  l.ln,
		Dial: func(ctx context.Context, peer int) (net.Conn, error) {
			c, err := d.DialContext(ctx, "tcp", peerAddrs[peer])
			if err != nil {
				return nil, err
			}
			return c, nil
		},
		HandshakeTimeout: l.opts.HandshakeTimeout,
		Logger:           l.opts.Logger,
		Name:             "tcp",
	})
	if err != nil {
		return nil, err
	}
	closeAll := func() {
		for _, c := range conns {
			if c != nil {
				c.Close()
			}
		}
	}
	t := &Transport{rank: l.rank, size: l.worldSize, opts: l.opts, links: make([]*link, l.worldSize), self: demux.New(l.rank)}
	for r, c := range conns {
		if c == nil {
			continue
		}
		tc := c.(*net.TCPConn)
		tc.SetNoDelay(true)
		if err := setCongestion(tc, l.opts.Congestion); err != nil {
			closeAll()
			return nil, fmt.Errorf("tcp: rank %d: connection to rank %d: %w", l.rank, r, err)
		}
		lk, err := newLink(t, r, tc)
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
