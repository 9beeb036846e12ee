package admit

import (
	"net"
	"testing"
	"time"
)

// fakeConn is a net.Conn with a chosen remote address that records Close.
type fakeConn struct {
	net.Conn
	remote net.Addr
	closed bool
}

func (c *fakeConn) RemoteAddr() net.Addr { return c.remote }
func (c *fakeConn) Close() error         { c.closed = true; return nil }

func conn(ip string) *fakeConn {
	return &fakeConn{remote: &net.TCPAddr{IP: net.ParseIP(ip), Port: 1234}}
}

func TestGateEvictsOldest(t *testing.T) {
	g := New(Options{MaxPending: 3, MaxPerSource: 2})
	a, b, c, d := conn("10.0.0.1"), conn("10.0.0.1"), conn("10.0.0.2"), conn("10.0.0.1")
	doneA := g.Admit(a)
	doneB := g.Admit(b)
	doneC := g.Admit(c)
	if g.Pending() != 3 || a.closed || b.closed || c.closed {
		t.Fatalf("pending %d, closed a=%v b=%v c=%v; want 3 pending and none closed", g.Pending(), a.closed, b.closed, c.closed)
	}
	// A third connection from 10.0.0.1 hits the per-source cap: the oldest
	// of that source (a) goes, not c.
	doneD := g.Admit(d)
	if !a.closed || b.closed || c.closed {
		t.Fatalf("closed a=%v b=%v c=%v; want only a", a.closed, b.closed, c.closed)
	}
	if !doneA() {
		t.Error("done of the evicted connection says it was not evicted")
	}
	// A new source at the total cap evicts the oldest overall (b).
	e := conn("10.0.0.3")
	doneE := g.Admit(e)
	if !b.closed || c.closed || d.closed {
		t.Fatalf("closed b=%v c=%v d=%v; want b", b.closed, c.closed, d.closed)
	}
	if doneB() != true || doneC() || doneD() || doneE() {
		t.Error("done results wrong: want only b evicted")
	}
	// done answers again as it first did.
	if !doneA() || !doneB() || doneC() || doneD() || doneE() {
		t.Error("second done results differ from the first")
	}
	if g.Pending() != 0 || g.Evicted() != 2 {
		t.Errorf("pending %d evicted %d, want 0 and 2", g.Pending(), g.Evicted())
	}
}

// TestGateFloodKeepsLegitimatePeer: however many stalled connections
// arrive, a connection that finishes its handshake before cap newer ones
// arrive is never evicted.
func TestGateFloodKeepsLegitimatePeer(t *testing.T) {
	g := New(Options{MaxPending: 16})
	var stalled []*fakeConn
	for range 1000 {
		c := conn("127.0.0.1")
		stalled = append(stalled, c)
		g.Admit(c) // never done: stalls
	}
	legit := conn("127.0.0.1")
	done := g.Admit(legit)
	for range 15 {
		g.Admit(conn("127.0.0.1"))
	}
	if legit.closed || done() {
		t.Fatal("legitimate connection evicted")
	}
	open := 0
	for _, c := range stalled {
		if !c.closed {
			open++
		}
	}
	if open != 0 {
		t.Fatalf("%d stalled connections still open, want 0", open)
	}
}

func TestLimiter(t *testing.T) {
	l := Limiter{Every: time.Second, Burst: 2}
	t0 := time.Unix(100, 0)
	var allowed []int
	for i := range 10 {
		if ok, _ := l.Allow(t0.Add(time.Duration(i) * time.Millisecond)); ok {
			allowed = append(allowed, i)
		}
	}
	if len(allowed) != 2 {
		t.Fatalf("allowed %v in one window, want 2", allowed)
	}
	ok, suppressed := l.Allow(t0.Add(2 * time.Second))
	if !ok || suppressed != 8 {
		t.Fatalf("next window: ok %v suppressed %d, want true and 8", ok, suppressed)
	}
}
