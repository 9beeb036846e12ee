package route

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cohortml/cohort/distributed/transport"
	"github.com/cohortml/cohort/distributed/transport/shm"
	"github.com/cohortml/cohort/distributed/transport/tcp"
	"github.com/cohortml/cohort/distributed/transport/transporttest"
)

// The tests below route real transports: ranks on one host (hostOf) share
// memory through shm, the others talk over tcp on loopback, each part
// connecting only the ranks it serves.

const testPrefix = "cohort-routetest"

var testToken = []byte("route-test-token")

// mixedListener is one rank's two halves of setup.
type mixedListener struct {
	rank, worldSize int
	local, remote   []int // peers on this host, peers elsewhere
	tcp             *tcp.Listener
	shm             *shm.Listener
}

func listenMixed(ctx context.Context, rank, worldSize int) (*mixedListener, error) {
	l := &mixedListener{rank: rank, worldSize: worldSize, local: []int{}, remote: []int{}}
	for r := range worldSize {
		switch {
		case r == rank:
		case hostOf(r) == hostOf(rank):
			l.local = append(l.local, r)
		default:
			l.remote = append(l.remote, r)
		}
	}
	var err error
	if len(l.remote) > 0 {
		l.tcp, err = tcp.Listen(ctx, rank, worldSize, "127.0.0.1:0", tcp.Options{Token: testToken, Peers: l.remote})
		if err != nil {
			return nil, err
		}
	}
	// A rank alone in the world still needs a part to reach itself.
	if len(l.local) > 0 || len(l.remote) == 0 {
		l.shm, err = shm.Listen(ctx, rank, worldSize, shm.Options{Token: testToken, Prefix: testPrefix, Peers: l.local})
		if err != nil {
			if l.tcp != nil {
				l.tcp.Close()
			}
			return nil, err
		}
	}
	return l, nil
}

// Addr is "tcp-address|shm-path", either possibly empty.
func (l *mixedListener) Addr() string {
	var a, b string
	if l.tcp != nil {
		a = l.tcp.Addr()
	}
	if l.shm != nil {
		b = l.shm.Addr()
	}
	return a + "|" + b
}

// Close closes both halves.
func (l *mixedListener) Close() error {
	var errs []error
	if l.tcp != nil {
		errs = append(errs, l.tcp.Close())
	}
	if l.shm != nil {
		errs = append(errs, l.shm.Close())
	}
	return errors.Join(errs...)
}

func (l *mixedListener) Connect(ctx context.Context, addrs []string) (*Transport, error) {
	tcpAddrs := make([]string, len(addrs))
	shmAddrs := make([]string, len(addrs))
	for r, a := range addrs {
		tcpAddrs[r], shmAddrs[r], _ = strings.Cut(a, "|")
	}
	via := make([]transport.Transport, l.worldSize)
	closeParts := func() {
		for _, p := range via {
			if p != nil {
				p.Close()
			}
		}
	}
	if l.tcp != nil {
		t, err := l.tcp.Connect(ctx, tcpAddrs)
		if err != nil {
			if l.shm != nil {
				l.shm.Close()
			}
			return nil, err
		}
		for _, r := range append([]int{l.rank}, l.remote...) {
			via[r] = t
		}
	}
	if l.shm != nil {
		t, err := l.shm.Connect(ctx, shmAddrs)
		if err != nil {
			closeParts()
			return nil, err
		}
		for _, r := range append([]int{l.rank}, l.local...) {
			via[r] = t
		}
	}
	tr, err := New(via)
	if err != nil {
		closeParts()
		return nil, err
	}
	return tr, nil
}

func mixedWorld(tb testing.TB, n int) transporttest.World {
	ts, errs := transporttest.ConnectWorld[*Transport](tb, n, func(ctx context.Context, r int) (*mixedListener, error) {
		return listenMixed(ctx, r, n)
	})
	// No Kill: the parts' crash hooks are internal to their packages. The
	// death of a rank is tested with real processes (TestProcessesKill9).
	return transporttest.WorldOf(tb, ts, errs, nil)
}

func leftovers(t *testing.T) []string {
	return transporttest.Leftovers(t, filepath.Join("/dev/shm", testPrefix+"-*"))
}

func TestConformanceMixed(t *testing.T) {
	transporttest.Run(t, mixedWorld, transporttest.Config{})
	if files := leftovers(t); len(files) > 0 {
		t.Errorf("files left in /dev/shm: %v", files)
	}
}

// TestMixedParts: within a host the route goes through shm, across hosts
// through tcp, and neither part reaches the ranks of the other.
func TestMixedParts(t *testing.T) {
	const n = 4
	w := mixedWorld(t, n)
	defer func() {
		for _, tr := range w.Transports {
			tr.Close()
		}
	}()
	ctx := context.Background()
	for r, tr := range w.Transports {
		rt := tr.(*Transport)
		for q := range n {
			part := rt.Via(q)
			want := "*tcp.Transport"
			if hostOf(q) == hostOf(r) {
				want = "*shm.Transport"
			}
			if got := fmt.Sprintf("%T", part); got != want {
				t.Errorf("rank %d reaches rank %d through %s, want %s", r, q, got, want)
			}
			if q == r {
				continue
			}
			// The part of the other kind refuses q.
			for p := range n {
				other := rt.Via(p)
				if other == part {
					continue
				}
				err := other.Send(ctx, q, transport.Tag{}, []byte{1})
				if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("rank %d: not a peer of this transport", q)) {
					t.Errorf("rank %d: %T Send to rank %d: %v, want a not-a-peer error", r, other, q, err)
				}
			}
		}
	}
}

var procSetup = transporttest.ListenSetup[*Transport](listenMixed)

// TestHelperProcess is the body of the child processes of the tests below.
func TestHelperProcess(t *testing.T) { transporttest.HelperProcess(procSetup) }

// TestProcessesExchange: ranks in separate processes, on two hosts or
// three, exchange messages of every size.
func TestProcessesExchange(t *testing.T) { procTests.Exchange(t) }

// TestProcessesKill9: SIGKILL the last rank in the middle of large
// transfers; every survivor, whether it reaches the victim through shm
// (its host mate) or tcp (the others), gets an error naming it within 5 s.
func TestProcessesKill9(t *testing.T) { procTests.Kill9(t) }

var procTests = transporttest.ProcessTests{
	Worlds:     []int{3, 4},
	KillWorlds: []int{4},
	Via: func(rank, victim int) string {
		if hostOf(rank) == hostOf(victim) {
			return "shm"
		}
		return "tcp"
	},
	AfterKill: func(t *testing.T) {
		if files := leftovers(t); len(files) > 0 {
			t.Errorf("files left in /dev/shm: %v", files)
		}
	},
}

// The benchmarks run ranks 0 and 1, which share a host: shm through the
// route, to compare with package shm's benchmarks of the same names.

// BenchmarkTransport runs transporttest's benchmarks.
func BenchmarkTransport(b *testing.B) { transporttest.Benchmarks(b, mixedWorld) }
