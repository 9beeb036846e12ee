package tcp

import (
	"context"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/cohortml/cohort/distributed/transport"
	"github.com/cohortml/cohort/distributed/transport/route"
	"github.com/cohortml/cohort/distributed/transport/transporttest"
)

// peersWorld gives every rank two transports, one connecting the ranks of
// its host and one the others (Options.Peers), combined by package route.
var peersWorld = transporttest.PeersWorld(func(tb testing.TB, n int, peers func(int) []int) ([]*Transport, []error) {
	return connectWorld(tb, n, func(r int) Options { return Options{Token: []byte("test-token"), Peers: peers(r)} })
}, (*Transport).kill, route.New)

// TestConformancePeers runs the suite over transports that each connect a
// subset of the world.
func TestConformancePeers(t *testing.T) {
	transporttest.Run(t, peersWorld, transporttest.Config{Worlds: []int{1, 2, 3, 4, 7}})
}

// TestPeers runs transporttest's checks of Options.Peers.
func TestPeers(t *testing.T) {
	transporttest.RunPeers(t, transporttest.Peers{
		Name: "tcp",
		Listen: func(ctx context.Context, rank, worldSize int, peers []int) error {
			l, err := Listen(ctx, rank, worldSize, "127.0.0.1:0", Options{Peers: peers})
			if err == nil {
				l.Close()
			}
			return err
		},
		Connect: func(tb testing.TB, peers [][]int) []transport.Transport {
			ts, errs := connectWorld(tb, len(peers), func(r int) Options { return Options{Peers: peers[r]} })
			return transporttest.Connected(tb, ts, errs)
		},
	})
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
