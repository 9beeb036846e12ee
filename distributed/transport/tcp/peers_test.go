package tcp

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/cohortml/cohort/distributed/transport"
	"github.com/cohortml/cohort/distributed/transport/route"
	"github.com/cohortml/cohort/distributed/transport/transporttest"
)

// nearFar splits rank's peers into those on its host (two ranks per host)
// and the others. Both are non-nil.
func nearFar(rank, worldSize int) (near, far []int) {
	near, far = []int{}, []int{}
	for r := range worldSize {
		switch {
		case r == rank:
		case r/2 == rank/2:
			near = append(near, r)
		default:
			far = append(far, r)
		}
	}
	return near, far
}

// peersWorld gives every rank two transports, one connecting the ranks of
// its host and one the others (Options.Peers), combined by package route.
func peersWorld(tb testing.TB, n int) transporttest.World {
	// Ranks on other hosts exist from a world of three; with fewer, the
	// second part would serve nobody (and route would not own it).
	parts := make([][]*Transport, 1, 2)
	if n > 2 {
		parts = parts[:2]
	}
	for i := range parts {
		ts, errs := connectWorld(tb, n, func(r int) Options {
			near, far := nearFar(r, n)
			return Options{Token: []byte("test-token"), Peers: [][]int{near, far}[i]}
		})
		for r, err := range errs {
			if err != nil {
				tb.Fatalf("part %d, rank %d: %v", i, r, err)
			}
		}
		parts[i] = ts
	}
	w := transporttest.World{Kill: func(r int) {
		for _, ts := range parts {
			ts[r].kill()
		}
	}}
	for r := range n {
		via := make([]transport.Transport, n)
		for q := range n {
			via[q] = parts[0][r]
			if q/2 != r/2 {
				via[q] = parts[1][r]
			}
		}
		tr, err := route.New(via)
		if err != nil {
			tb.Fatal(err)
		}
		w.Transports = append(w.Transports, tr)
	}
	return w
}

// TestConformancePeers runs the suite over transports that each connect a
// subset of the world.
func TestConformancePeers(t *testing.T) {
	transporttest.Run(t, peersWorld, transporttest.Config{Worlds: []int{1, 2, 3, 4, 7}})
}

func TestPeersRejected(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name  string
		rank  int
		peers []int
		want  string
	}{
		{"out-of-range", 0, []int{1, 3}, "tcp: rank 0: Options.Peers: peer rank 3 out of range [0, 3)"},
		{"negative", 0, []int{-1}, "tcp: rank 0: Options.Peers: peer rank -1 out of range [0, 3)"},
		{"self", 1, []int{2, 1}, "tcp: rank 1: Options.Peers: lists rank 1, this rank itself"},
		{"twice", 0, []int{2, 1, 2}, "tcp: rank 0: Options.Peers: lists rank 2 twice"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l, err := Listen(ctx, tc.rank, 3, "127.0.0.1:0", Options{Peers: tc.peers})
			if err == nil {
				l.Close()
				t.Fatal("Listen succeeded")
			}
			if err.Error() != tc.want {
				t.Fatalf("error %q, want %q", err, tc.want)
			}
		})
	}
}

// TestPeersNotReachable: a rank outside Options.Peers is an error at once,
// naming it, and its address is not needed.
func TestPeersNotReachable(t *testing.T) {
	ts, errs := connectWorld(t, 3, func(r int) Options {
		return Options{Peers: [][]int{{1}, {0}, {}}[r]}
	})
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	defer func() {
		for _, tr := range ts {
			tr.Close()
		}
	}()
	ctx := context.Background()
	for _, c := range []struct{ from, to int }{{0, 2}, {2, 0}, {2, 1}} {
		want := fmt.Sprintf("tcp: rank %d: send to rank %d: not a peer of this transport", c.from, c.to)
		if err := ts[c.from].Send(ctx, c.to, transport.Tag{}, []byte{1}); err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("Send from %d to %d: %v, want %q", c.from, c.to, err, want)
		}
		want = fmt.Sprintf("tcp: rank %d: recv from rank %d: not a peer of this transport", c.from, c.to)
		if err := ts[c.from].Recv(ctx, c.to, transport.Tag{}, []byte{1}); err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("Recv of %d from %d: %v, want %q", c.from, c.to, err, want)
		}
	}
	// The peers talk; rank 2 still reaches itself.
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(ts[0].Send(ctx, 1, transport.Tag{Seq: 1}, []byte("hi")))
	p := make([]byte, 2)
	must(ts[1].Recv(ctx, 0, transport.Tag{Seq: 1}, p))
	must(ts[2].Send(ctx, 2, transport.Tag{Seq: 2}, []byte("me")))
	must(ts[2].Recv(ctx, 2, transport.Tag{Seq: 2}, p))
	if string(p) != "me" {
		t.Fatalf("got %q", p)
	}
}

// TestPeersDisagree: a rank that dials a rank not counting it among its
// peers is refused with a reason naming both.
func TestPeersDisagree(t *testing.T) {
	defer transporttest.CheckGoroutines(t, runtime.NumGoroutine())
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	// Rank 0 expects rank 2 only; rank 1 believes rank 0 is its peer.
	peers := [][]int{{2}, {0}, {0}}
	ls := make([]*Listener, 3)
	addrs := make([]string, 3)
	for r := range 3 {
		l, err := Listen(ctx, r, 3, "127.0.0.1:0", Options{Peers: peers[r]})
		if err != nil {
			t.Fatal(err)
		}
		ls[r], addrs[r] = l, l.Addr()
	}
	type res struct {
		tr  *Transport
		err error
	}
	done0 := make(chan res, 1)
	go func() { tr, err := ls[0].Connect(ctx, addrs); done0 <- res{tr, err} }()
	// Rank 0 waits for rank 2 while rank 1 dials it.
	_, err := ls[1].Connect(ctx, addrs)
	t.Logf("rank 1: %v", err)
	if err == nil || !strings.Contains(err.Error(), "rank 1 dialed rank 0, which does not count it among its peers") {
		t.Errorf("rank 1: %v, want a refusal naming ranks 1 and 0", err)
	}
	// Rank 2 completes rank 0's mesh.
	tr2, err := ls[2].Connect(ctx, addrs)
	if err != nil {
		t.Fatalf("rank 2: %v", err)
	}
	defer tr2.Close()
	r0 := <-done0
	if r0.err != nil {
		t.Fatalf("rank 0: %v", r0.err)
	}
	r0.tr.Close()
}
