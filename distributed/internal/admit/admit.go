// Package admit bounds the connections a listener holds before they have
// authenticated, so that a flood of connections that never finish the
// handshake (or finish it slowly) costs the server a fixed number of file
// descriptors and goroutines and never keeps a legitimate peer out.
//
// A Gate counts the pending connections, in total and per source address.
// When a new connection would exceed either cap, the gate closes the oldest
// pending connection (of that source, when the per-source cap is the one
// hit) to make room: a legitimate peer finishes its handshake in a few
// round trips, while a staller is by then the oldest, so the eviction
// falls on it. Each connection's handshake is still bounded by its
// deadline, set by the caller.
//
// Refusals are logged through a Limiter, so that a flood writes a few lines
// and a count rather than a line per connection.
package admit

import (
	"net"
	"sync"
	"time"
)

// Defaults for a zero Options.
const (
	DefaultMaxPending   = 256
	DefaultMaxPerSource = 128
)

// Options sizes a Gate; the zero value works.
type Options struct {
	MaxPending   int // pending connections in all; 0 means DefaultMaxPending
	MaxPerSource int // pending connections from one IP; 0 means DefaultMaxPerSource
}

// Gate tracks pending connections. It is safe for concurrent use.
type Gate struct {
	maxPending, maxPerSource int

	mu       sync.Mutex
	seq      uint64
	pending  map[*entry]struct{}
	bySource map[string]int
	evicted  int
}

type entry struct {
	conn   net.Conn
	source string
	seq    uint64 // arrival order
}

// New returns a gate sized by o.
func New(o Options) *Gate {
	g := &Gate{maxPending: o.MaxPending, maxPerSource: o.MaxPerSource,
		pending: make(map[*entry]struct{}), bySource: make(map[string]int)}
	if g.maxPending <= 0 {
		g.maxPending = DefaultMaxPending
	}
	if g.maxPerSource <= 0 {
		g.maxPerSource = DefaultMaxPerSource
	}
	return g
}

// Source is the part of a remote address that the per-source cap counts:
// the IP for TCP, the whole address otherwise.
func Source(a net.Addr) string {
	if a == nil {
		return ""
	}
	if ta, ok := a.(*net.TCPAddr); ok {
		return ta.IP.String()
	}
	return a.String()
}

// Admit registers c as pending, first closing the oldest pending
// connections that keep it under the caps. The caller must call the
// returned done when c's handshake ends, whatever its outcome, and
// should call it before telling the peer that it is accepted, so that an
// accepted connection is never evicted; done reports whether c was
// evicted meanwhile (its handshake then failed because the gate closed
// it). Later calls of done return the first call's answer.
func (g *Gate) Admit(c net.Conn) (done func() (evicted bool)) {
	e := &entry{conn: c, source: Source(c.RemoteAddr())}
	var victims []net.Conn
	g.mu.Lock()
	g.seq++
	e.seq = g.seq
	for g.bySource[e.source] >= g.maxPerSource {
		victims = append(victims, g.evictOldestLocked(e.source))
	}
	for len(g.pending) >= g.maxPending {
		victims = append(victims, g.evictOldestLocked(""))
	}
	g.pending[e] = struct{}{}
	g.bySource[e.source]++
	g.mu.Unlock()
	for _, v := range victims {
		v.Close()
	}
	called, evicted := false, false
	return func() bool {
		g.mu.Lock()
		defer g.mu.Unlock()
		if !called {
			called = true
			_, pending := g.pending[e]
			if evicted = !pending; pending {
				g.removeLocked(e)
			}
		}
		return evicted
	}
}

// evictOldestLocked removes the oldest pending entry (of source, unless
// "") and returns its connection for the caller to close outside the lock.
func (g *Gate) evictOldestLocked(source string) net.Conn {
	var old *entry
	for e := range g.pending {
		if (source == "" || e.source == source) && (old == nil || e.seq < old.seq) {
			old = e
		}
	}
	g.removeLocked(old)
	g.evicted++
	return old.conn
}

func (g *Gate) removeLocked(e *entry) {
	delete(g.pending, e)
	if g.bySource[e.source]--; g.bySource[e.source] <= 0 {
		delete(g.bySource, e.source)
	}
}

// Pending is the number of connections now pending.
func (g *Gate) Pending() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.pending)
}

// Evicted is the number of connections the gate has closed so far.
func (g *Gate) Evicted() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.evicted
}

// Limiter lets through at most Burst events per Every and counts the rest,
// for rate-limited logging. The zero value allows 5 events per 10 s.
type Limiter struct {
	Every time.Duration
	Burst int

	mu         sync.Mutex
	start      time.Time
	n          int
	suppressed int
}

// Allow reports whether an event at now may be logged; when it may, it
// also returns how many events were suppressed since the last one allowed.
func (l *Limiter) Allow(now time.Time) (ok bool, suppressed int) {
	every, burst := l.Every, l.Burst
	if every <= 0 {
		every = 10 * time.Second
	}
	if burst <= 0 {
		burst = 5
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if now.Sub(l.start) >= every {
		l.start, l.n = now, 0
	}
	if l.n >= burst {
		l.suppressed++
		return false, 0
	}
	l.n++
	s := l.suppressed
	l.suppressed = 0
	return true, s
}
