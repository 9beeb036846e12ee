package route

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/cohortml/cohort/distributed/transport"
	"github.com/cohortml/cohort/distributed/transport/inproc"
	"github.com/cohortml/cohort/distributed/transport/transporttest"
)

func TestNewRejectsBadParts(t *testing.T) {
	two := inproc.NewMesh(2)
	three := inproc.NewMesh(3)
	tests := []struct {
		name string
		via  []transport.Transport
		want string
	}{
		{"none", nil, "route: New: no transports (want one per rank)"},
		{"nil-part", []transport.Transport{two[0], nil}, "route: New: no transport for rank 1"},
		{"other-rank", []transport.Transport{two[0], two[1]}, "route: New: the transport for rank 1 is rank 1's, the one for rank 0 rank 0's (want all of one rank)"},
		{"other-size", []transport.Transport{two[0], three[0]}, "route: New: 2 transports (one per rank), but the one for rank 1 has 3 ranks"},
		{"too-few", []transport.Transport{three[1], three[1]}, "route: New: 2 transports (one per rank), but the one for rank 0 has 3 ranks"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr, err := New(tc.via)
			if err == nil {
				t.Fatalf("New succeeded: rank %d of %d", tr.Rank(), tr.Size())
			}
			if err.Error() != tc.want {
				t.Fatalf("error %q, want %q", err, tc.want)
			}
		})
	}
}

// hostOf places ranks two to a host (the last host may hold one), the
// layout of the tests below.
func hostOf(r int) int { return r / 2 }

// split routes a world of n ranks over two inproc meshes: pairs on one
// host talk through local, the others through remote.
func split(tb testing.TB, n int) (local, remote []*inproc.Transport, ts []*Transport) {
	tb.Helper()
	local, remote = inproc.NewMesh(n), inproc.NewMesh(n)
	for r := range n {
		via := make([]transport.Transport, n)
		for q := range n {
			via[q] = remote[r]
			if hostOf(q) == hostOf(r) {
				via[q] = local[r]
			}
		}
		tr, err := New(via)
		if err != nil {
			tb.Fatal(err)
		}
		ts = append(ts, tr)
	}
	return local, remote, ts
}

// splitWorld is split as a conformance world; killing a rank kills it in
// both meshes.
func splitWorld(tb testing.TB, n int) transporttest.World {
	local, remote, ts := split(tb, n)
	w := transporttest.World{Kill: func(r int) { local[r].Kill(); remote[r].Kill() }}
	for _, tr := range ts {
		w.Transports = append(w.Transports, tr)
	}
	return w
}

func TestConformanceInproc(t *testing.T) {
	transporttest.Run(t, splitWorld, transporttest.Config{})
}

// TestRouting: each message travels through the part assigned to its
// peer, in both directions, and messages to this rank through its own.
func TestRouting(t *testing.T) {
	const n = 4
	local, remote, ts := split(t, n)
	for _, tr := range ts {
		defer tr.Close()
	}
	ctx := context.Background()
	for from := range n {
		for to := range n {
			t.Run(fmt.Sprintf("%d-to-%d", from, to), func(t *testing.T) {
				tag := transport.Tag{Group: 1, Seq: uint64(from*n + to)}
				if err := ts[from].Send(ctx, to, tag, []byte{byte(from), byte(to)}); err != nil {
					t.Fatal(err)
				}
				// The message waits in exactly the mesh of the route.
				want, other := remote[to], local[to]
				if hostOf(from) == hostOf(to) {
					want, other = local[to], remote[to]
				}
				if ts[to].Via(from) != want {
					t.Fatalf("rank %d reaches rank %d through the wrong part", to, from)
				}
				cctx, cancel := context.WithCancel(ctx)
				cancel()
				if err := other.Recv(cctx, from, tag, make([]byte, 2)); !errors.Is(err, context.Canceled) {
					t.Fatalf("the other part holds a message (or failed): %v", err)
				}
				p := make([]byte, 2)
				if err := ts[to].Recv(ctx, from, tag, p); err != nil {
					t.Fatal(err)
				}
				if p[0] != byte(from) || p[1] != byte(to) {
					t.Fatalf("got %v", p)
				}
			})
		}
	}
}

// TestCloseClosesEachPartOnce: Close reaches every part, once, even when
// a part serves many ranks, and reports the parts' errors.
func TestCloseClosesEachPartOnce(t *testing.T) {
	mesh := inproc.NewMesh(3)
	a := &countingPart{Transport: mesh[0]}
	b := &countingPart{Transport: mesh[0], err: errors.New("b: broken")}
	tr, err := New([]transport.Transport{a, b, a})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make([]error, 3)
	for i := range errs {
		wg.Go(func() { errs[i] = tr.Close() })
	}
	wg.Wait()
	for i, err := range errs {
		if err == nil || !strings.Contains(err.Error(), "b: broken") {
			t.Errorf("Close %d: %v, want b's error", i, err)
		}
	}
	if a.closes.Load() != 1 || b.closes.Load() != 1 {
		t.Errorf("parts closed %d and %d times, want once each", a.closes.Load(), b.closes.Load())
	}
	err = tr.Send(context.Background(), 1, transport.Tag{}, []byte{1})
	if !errors.Is(err, transport.ErrClosed) {
		t.Errorf("Send after Close: %v, want ErrClosed", err)
	}
}

type countingPart struct {
	*inproc.Transport
	closes atomic.Int32
	err    error
}

func (c *countingPart) Close() error {
	c.closes.Add(1)
	c.Transport.Close()
	return c.err
}
