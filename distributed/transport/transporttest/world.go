package transporttest

import (
	"context"
	"io"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cohortml/cohort/distributed/transport"
)

// Listener is one rank's transport between its two steps of setup: it
// listens at Addr, and Connect, given every rank's address, finishes the
// mesh (tcp.Listener, shm.Listener).
type Listener[T transport.Transport] interface {
	Addr() string
	Connect(ctx context.Context, addrs []string) (T, error)
}

// setupTimeout bounds the setup of a world by ConnectWorld.
const setupTimeout = 30 * time.Second

// ConnectWorld sets up n ranks, each with the listener listen starts for
// it, the ranks connecting concurrently as separate processes would. It
// fails tb if a listener does not start; errs[r] is rank r's Connect
// error (ts[r] is valid where it is nil). Setup is bounded by 30 s.
func ConnectWorld[T transport.Transport, L Listener[T]](tb testing.TB, n int, listen func(ctx context.Context, rank int) (L, error)) (ts []T, errs []error) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	return ConnectAll[T](ctx, ListenAll(tb, ctx, n, listen))
}

// ListenAll starts the listeners of n ranks, rank r's with listen, and
// fails tb if one does not start.
func ListenAll[L any](tb testing.TB, ctx context.Context, n int, listen func(ctx context.Context, rank int) (L, error)) []L {
	tb.Helper()
	ls := make([]L, n)
	for r := range n {
		l, err := listen(ctx, r)
		if err != nil {
			tb.Fatal(err)
		}
		ls[r] = l
	}
	return ls
}

// ConnectAll connects the listeners of a world's ranks, element r being
// rank r's, each in its own goroutine, and returns what each Connect
// returned.
func ConnectAll[T transport.Transport, L Listener[T]](ctx context.Context, ls []L) ([]T, []error) {
	addrs := make([]string, len(ls))
	for r, l := range ls {
		addrs[r] = l.Addr()
	}
	ts := make([]T, len(ls))
	errs := make([]error, len(ls))
	var wg sync.WaitGroup
	for r := range ls {
		wg.Go(func() { ts[r], errs[r] = ls[r].Connect(ctx, addrs) })
	}
	wg.Wait()
	return ts, errs
}

// ConnectErrors connects the listeners as ConnectAll does, closes the
// transports that connected, and returns each rank's Connect error: for
// tests of a setup that must fail.
func ConnectErrors[T transport.Transport, L Listener[T]](ctx context.Context, ls []L) []error {
	ts, errs := ConnectAll[T](ctx, ls)
	for r, tr := range ts {
		if errs[r] == nil {
			tr.Close()
		}
	}
	return errs
}

// WorldOf returns the world of the transports ts once every rank has
// connected (errs[r] == nil; otherwise it fails tb as Connected does),
// killing rank r with kill(ts[r]) (no Kill if kill is nil).
func WorldOf[T transport.Transport](tb testing.TB, ts []T, errs []error, kill func(T)) World {
	tb.Helper()
	w := World{Transports: Connected(tb, ts, errs)}
	if kill != nil {
		w.Kill = func(r int) { kill(ts[r]) }
	}
	return w
}

// hostOf places ranks two to a host, the layout of PeersWorld.
func hostOf(rank int) int { return rank / 2 }

// nearFar splits rank's peers into those on its host and the others.
// Both are non-nil.
func nearFar(rank, worldSize int) (near, far []int) {
	near, far = []int{}, []int{}
	for r := range worldSize {
		switch {
		case r == rank:
		case hostOf(r) == hostOf(rank):
			near = append(near, r)
		default:
			far = append(far, r)
		}
	}
	return near, far
}

// PeersWorld returns a Factory whose ranks each have two transports, one
// connecting the ranks of its host (two ranks a host) and one the others,
// combined by route (route.New, which transporttest cannot import: route's
// own tests import transporttest): it checks a transport that connects a
// subset of the world (tcp.Options.Peers, shm.Options.Peers). connect sets
// up a world of n ranks, rank r with the peer list peers(r), as
// ConnectWorld does; kill ends one transport abruptly.
func PeersWorld[T, R transport.Transport](connect func(tb testing.TB, n int, peers func(rank int) []int) ([]T, []error), kill func(T), route func(via []transport.Transport) (R, error)) Factory {
	return func(tb testing.TB, n int) World {
		// Ranks on other hosts exist from a world of three; with fewer,
		// the second part would serve nobody (and route would not own it).
		parts := make([][]T, 1, 2)
		if n > 2 {
			parts = parts[:2]
		}
		for i := range parts {
			ts, errs := connect(tb, n, func(r int) []int {
				near, far := nearFar(r, n)
				return [][]int{near, far}[i]
			})
			for r, err := range errs {
				if err != nil {
					tb.Fatalf("part %d, rank %d: %v", i, r, err)
				}
			}
			parts[i] = ts
		}
		w := World{Kill: func(r int) {
			for _, ts := range parts {
				kill(ts[r])
			}
		}}
		for r := range n {
			via := make([]transport.Transport, n)
			for q := range n {
				via[q] = parts[0][r]
				if hostOf(q) != hostOf(r) {
					via[q] = parts[1][r]
				}
			}
			tr, err := route(via)
			if err != nil {
				tb.Fatal(err)
			}
			w.Transports = append(w.Transports, tr)
		}
		return w
	}
}

// ListenSetup returns the ProcSetup of a transport whose rank listens
// with listen, publishes its address and connects to every rank's.
func ListenSetup[T transport.Transport, L interface {
	Listener[T]
	Close() error
}](listen func(ctx context.Context, rank, worldSize int) (L, error)) ProcSetup {
	return func(ctx context.Context, rank, worldSize int, exchange func(string) ([]string, error)) (transport.Transport, error) {
		l, err := listen(ctx, rank, worldSize)
		if err != nil {
			return nil, err
		}
		addrs, err := exchange(l.Addr())
		if err != nil {
			l.Close()
			return nil, err
		}
		return l.Connect(ctx, addrs)
	}
}

// Leftovers lists the files that match the glob pattern: those a
// transport's tests must not leave behind ("/dev/shm/cohort-test-*").
func Leftovers(tb testing.TB, pattern string) []string {
	tb.Helper()
	m, err := filepath.Glob(pattern)
	if err != nil {
		tb.Fatal(err)
	}
	return m
}

// BadListen is a case of RunBadListen: a rank's Listen with these
// arguments fails with an error that starts with Want.
type BadListen[O any] struct {
	Name        string
	Rank, World int
	Opts        O
	Want        string
}

// RunBadListen runs each case as a subtest of t: listen must fail, with
// the error the case wants (a listener that starts is closed).
func RunBadListen[O any, L io.Closer](t *testing.T, listen func(ctx context.Context, rank, worldSize int, o O) (L, error), cases []BadListen[O]) {
	for _, tc := range cases {
		t.Run(tc.Name, func(t *testing.T) {
			l, err := listen(context.Background(), tc.Rank, tc.World, tc.Opts)
			if err == nil {
				l.Close()
				t.Fatal("Listen succeeded")
			}
			if !strings.HasPrefix(err.Error(), tc.Want) {
				t.Fatalf("error %q, want prefix %q", err, tc.Want)
			}
		})
	}
}
