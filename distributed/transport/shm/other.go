//go:build !linux

package shm

import (
	"context"
	"errors"

	"github.com/cohortml/cohort/distributed/transport"
)

// errUnsupported is returned by Listen where futexes are missing.
var errUnsupported = errors.New("shm: the shared-memory transport needs Linux")

// Listener is unavailable on this platform.
type Listener struct{}

// Listen reports that the transport needs Linux.
func Listen(ctx context.Context, rank, worldSize int, opts Options) (*Listener, error) {
	return nil, errUnsupported
}

// Addr is never reached on this platform.
func (l *Listener) Addr() string { return "" }

// Close does nothing on this platform.
func (l *Listener) Close() error { return nil }

// Connect reports that the transport needs Linux.
func (l *Listener) Connect(ctx context.Context, peerAddrs []string) (*Transport, error) {
	return nil, errUnsupported
}

// Transport is unavailable on this platform.
type Transport struct{ transport.Transport }
