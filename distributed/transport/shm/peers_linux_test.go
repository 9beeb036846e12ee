package shm

import (
	"context"
	"os"
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
	return connectWorld(tb, n, func(r int) Options {
		return Options{Token: []byte("test-token"), Prefix: testPrefix, RingBytes: 1 << 20, Peers: peers(r)}
	})
}, (*Transport).kill, route.New)

// TestConformancePeers runs the suite over transports that each connect a
// subset of the world.
func TestConformancePeers(t *testing.T) {
	transporttest.Run(t, peersWorld, transporttest.Config{Worlds: []int{1, 2, 3, 4, 7}})
	checkLeftovers(t)
}

// TestPeers runs transporttest's checks of Options.Peers, and leaves no
// file behind.
func TestPeers(t *testing.T) {
	transporttest.RunPeers(t, transporttest.Peers{
		Name: "shm",
		Listen: func(ctx context.Context, rank, worldSize int, peers []int) error {
			l, err := Listen(ctx, rank, worldSize, Options{Prefix: testPrefix, Peers: peers})
			if err == nil {
				l.Close()
			}
			return err
		},
		Connect: func(tb testing.TB, peers [][]int) []transport.Transport {
			ts, errs := connectWorld(tb, len(peers), func(r int) Options { return Options{Prefix: testPrefix, Peers: peers[r]} })
			return transporttest.Connected(tb, ts, errs)
		},
	})
	checkLeftovers(t)
}

// TestPeersSegmentSize: a segment holds rings for the peers only.
func TestPeersSegmentSize(t *testing.T) {
	const ring = 1 << 16
	for _, tc := range []struct {
		name  string
		world int
		peers []int
		slots int
	}{
		{"all", 5, nil, 4},
		{"two", 64, []int{9, 3}, 2},
		{"none", 3, []int{}, 0},
		{"table-over-a-page", 2000, nil, 1999},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := Listen(context.Background(), 1, tc.world, Options{Prefix: testPrefix, RingBytes: ring, Peers: tc.peers})
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			st, err := os.Stat(l.Addr())
			if err != nil {
				t.Fatal(err)
			}
			ctl := pageBytes
			if tc.slots > (pageBytes-offSenders)/4 {
				ctl = 3 * pageBytes // 512 + 4·1999 bytes
			}
			if want := int64(ctl + tc.slots*(pageBytes+ring)); st.Size() != want {
				t.Fatalf("segment of %d bytes, want %d", st.Size(), want)
			}
		})
	}
}

// TestPeersDisagree: a rank that counts as a peer a rank whose segment has
// no ring for it fails, naming both, and leaves no file behind.
func TestPeersDisagree(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	peers := [][]int{{1}, {}}
	ls := make([]*Listener, 2)
	addrs := make([]string, 2)
	for r := range 2 {
		l, err := Listen(ctx, r, 2, Options{Prefix: testPrefix, Peers: peers[r]})
		if err != nil {
			t.Fatal(err)
		}
		ls[r], addrs[r] = l, l.Addr()
	}
	// Rank 0 first: rank 1, which has no peers, removes its segment as
	// soon as it connects.
	errs := make([]error, 2)
	for r := range 2 {
		tr, err := ls[r].Connect(ctx, addrs)
		if tr != nil {
			tr.Close()
		}
		errs[r] = err
	}
	want := "shm: rank 0: shm: segment of rank 1 has no ring for rank 0: rank 1 does not count it among its peers"
	if errs[0] == nil || !strings.HasPrefix(errs[0].Error(), want) {
		t.Errorf("rank 0: %v, want %q", errs[0], want)
	}
	if errs[1] != nil {
		t.Errorf("rank 1 (no peers): %v", errs[1])
	}
	checkLeftovers(t)
}
