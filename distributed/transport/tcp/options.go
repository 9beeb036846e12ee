package tcp

import (
	"cmp"
	"fmt"
	"log/slog"
	"time"

	"github.com/cohortml/cohort/distributed/wire"
)

// Options configures a transport; the zero value works.
type Options struct {
	// Token is the job's shared secret. When set, a connection is accepted
	// only from a peer that proves it holds the same token, and this end
	// proves it too; the token never travels. Empty means no
	// authentication (any process that reaches the listener during setup
	// may join as a rank).
	Token []byte
	// ChunkBytes is the largest frame payload: longer messages are split.
	// 0 means 1 MiB; at most wire.DefaultMaxLength.
	ChunkBytes int64
	// MaxMessageBytes is the longest message accepted from a peer; a
	// longer one is a protocol error that breaks the link. 0 means 64 GiB.
	MaxMessageBytes int64
	// HandshakeTimeout bounds the handshake of one connection. 0 means 30 s.
	HandshakeTimeout time.Duration
	// CloseTimeout bounds how long Close waits for each peer to confirm
	// it received everything sent. 0 means 5 s.
	CloseTimeout time.Duration
	// Liveness is roughly how long a silent peer host is given before its
	// link fails (TCP keepalive). 0 means 15 s.
	Liveness time.Duration
	// Logger receives refused connections and link failures; nil discards
	// them.
	Logger *slog.Logger
	// Peers lists the ranks this rank connects to, by their rank in the
	// world, in any order and without this rank; nil means every other
	// rank, and an empty list none. A rank left out is out of this
	// transport's reach: Send and Recv naming it fail at once. The lists
	// must agree: rank a lists b exactly when b lists a (a rank that dials
	// a peer not listing it is refused). A job whose ranks share hosts
	// lists only the ranks on other hosts here and reaches the rest
	// through another transport (see package route).
	Peers []int
	// Spin is how long a receiver polls the socket itself (non-blocking
	// reads on its own goroutine) before it waits for the link's reader
	// goroutine, whose wake-up through the runtime's poller costs tens of
	// microseconds on a virtual machine. Only a receiver somebody waits
	// for polls (transport.WaitHint). 0 means no polling: right when the
	// ranks on a host outnumber its CPUs, where a poll takes the CPU a
	// peer needs to answer.
	Spin time.Duration
	// Congestion is the TCP congestion control of the job's connections
	// (Linux's TCP_CONGESTION, such as "cubic", "reno" or "dctcp"; the
	// kernel must offer it). "" keeps the system's default, except that
	// a loopback connection (ranks of one host) trades BBR for cubic.
	// Over loopback, on an Intel Xeon VM whose default is BBR, BBR
	// connections fell into a state, depending on the sizes run before,
	// in which a two-rank 1 MiB all-reduce took 0.85-1.1 ms instead of
	// 0.4 (reordered segments, SACK recoveries); under cubic it took
	// 0.42-0.6 ms whatever the order, and 16 MiB 8.1 ms against 10.9
	// (medians). Between network namespaces of that VM (veth), BBR was
	// the faster (64 KiB 41 against 80 µs, 16 MiB 20-23 against 24-55
	// ms), so connections to other hosts keep the default.
	// CongestionSystem keeps the default everywhere.
	Congestion string
}

// CongestionSystem as Options.Congestion keeps the system's default
// congestion control.
const CongestionSystem = "system"

func (o *Options) validate() error {
	switch {
	case o.ChunkBytes < 0 || o.ChunkBytes > wire.DefaultMaxLength:
		return fmt.Errorf("tcp: Options.ChunkBytes %d out of range [0, %d]", o.ChunkBytes, wire.DefaultMaxLength)
	case o.MaxMessageBytes < 0:
		return fmt.Errorf("tcp: Options.MaxMessageBytes %d is negative", o.MaxMessageBytes)
	case o.HandshakeTimeout < 0:
		return fmt.Errorf("tcp: Options.HandshakeTimeout %v is negative", o.HandshakeTimeout)
	case o.CloseTimeout < 0:
		return fmt.Errorf("tcp: Options.CloseTimeout %v is negative", o.CloseTimeout)
	case o.Liveness < 0:
		return fmt.Errorf("tcp: Options.Liveness %v is negative", o.Liveness)
	}
	return nil
}

// withDefaults returns o with zero fields replaced by their defaults.
func (o Options) withDefaults() Options {
	o.ChunkBytes = cmp.Or(o.ChunkBytes, 1<<20)
	o.MaxMessageBytes = cmp.Or(o.MaxMessageBytes, 64<<30)
	o.HandshakeTimeout = cmp.Or(o.HandshakeTimeout, 30*time.Second)
	o.CloseTimeout = cmp.Or(o.CloseTimeout, 5*time.Second)
	o.Liveness = cmp.Or(o.Liveness, 15*time.Second)
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o
}

// keepAlive derives probe timings from Liveness: idle for half of it,
// then five probes over the other half.
func (o *Options) keepAlive() (idle, interval time.Duration, count int) {
	idle = max(o.Liveness/2, time.Second)
	interval = max(o.Liveness/10, time.Second)
	return idle, interval, 5
}
