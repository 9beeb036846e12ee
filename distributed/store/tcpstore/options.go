package tcpstore

import (
	"cmp"
	"fmt"
	"log/slog"
	"time"
)

// Options configures a Server or a Client. The zero value works: no
// token, default limits, slog.Default() for the server's log.
type Options struct {
	// Token is the shared secret both ends prove they hold before any
	// command (HMAC-SHA256 challenge–response; the token never crosses
	// the wire). Every process of a job must use the same token. An empty
	// token is a valid but public secret: anyone who can reach the port
	// and also has no token may use the store.
	Token string
	// MaxFrameBytes bounds one message, and so one value. Frames that
	// declare more are refused before anything is allocated.
	// 0 means DefaultMaxFrameBytes.
	MaxFrameBytes int64
	// HandshakeTimeout bounds authentication of a new connection on the
	// server, and on the client when Dial's context has no earlier
	// deadline. 0 means 10 s.
	HandshakeTimeout time.Duration
	// WriteTimeout bounds one write on either end: a peer that stops
	// reading for this long loses its connection. 0 means 30 s.
	WriteTimeout time.Duration
	// MaxPendingConns bounds the server's connections still in the
	// handshake, in all and from one IP address (MaxPendingPerSource);
	// past either, the oldest pending connection is closed to make room,
	// so a flood of connections that never authenticate costs a fixed
	// number of descriptors and cannot keep a rank out. 0 means
	// admit.DefaultMaxPending / DefaultMaxPerSource (256 / 128).
	MaxPendingConns, MaxPendingPerSource int
	// MaxBlockedPerConn bounds the Get/Wait calls one client connection
	// may have blocked on the server at once. 0 means 65536.
	MaxBlockedPerConn int
	// Logger receives the server's log: refused connections and protocol
	// violations at Warn, connections at Debug. nil means slog.Default();
	// use slog.New(slog.DiscardHandler) to silence it.
	Logger *slog.Logger
}

func (o Options) withDefaults() (Options, error) {
	if err := o.validate(); err != nil {
		return o, err
	}
	o.MaxFrameBytes = cmp.Or(o.MaxFrameBytes, DefaultMaxFrameBytes)
	o.HandshakeTimeout = cmp.Or(o.HandshakeTimeout, 10*time.Second)
	o.WriteTimeout = cmp.Or(o.WriteTimeout, 30*time.Second)
	o.MaxBlockedPerConn = cmp.Or(o.MaxBlockedPerConn, 1<<16)
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o, nil
}

func (o Options) validate() error {
	switch {
	case o.MaxFrameBytes < 0 || o.MaxFrameBytes > 1<<32-1:
		return fmt.Errorf("tcpstore: Options.MaxFrameBytes = %d: want 0 (default) or 1..%d", o.MaxFrameBytes, int64(1<<32-1))
	case o.MaxFrameBytes > 0 && o.MaxFrameBytes < 64:
		return fmt.Errorf("tcpstore: Options.MaxFrameBytes = %d: want at least 64", o.MaxFrameBytes)
	case o.HandshakeTimeout < 0:
		return fmt.Errorf("tcpstore: Options.HandshakeTimeout = %v: want >= 0", o.HandshakeTimeout)
	case o.WriteTimeout < 0:
		return fmt.Errorf("tcpstore: Options.WriteTimeout = %v: want >= 0", o.WriteTimeout)
	case o.MaxPendingConns < 0 || o.MaxPendingPerSource < 0:
		return fmt.Errorf("tcpstore: Options.MaxPendingConns = %d, MaxPendingPerSource = %d: want >= 0", o.MaxPendingConns, o.MaxPendingPerSource)
	case o.MaxBlockedPerConn < 0:
		return fmt.Errorf("tcpstore: Options.MaxBlockedPerConn = %d: want >= 0", o.MaxBlockedPerConn)
	}
	return nil
}
