package tcpstore

import (
	"io"
	"runtime"
)

// ClientHandshakeForTest runs the client side of authentication on a raw
// connection, so tests can speak the protocol by hand afterwards.
func ClientHandshakeForTest(rw io.ReadWriter, token string) error { return clientHandshake(rw, token) }

// ServerWaiters reports how many Get/Wait requests are parked on s.
func ServerWaiters(s *Server) int { return s.mem.Waiters() }

type runtimeMem struct{ total uint64 }

func (m *runtimeMem) read() {
	var s runtime.MemStats
	runtime.ReadMemStats(&s)
	m.total = s.TotalAlloc
}
