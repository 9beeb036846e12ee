package transporttest

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/cohortml/cohort/distributed/transport"
)

// Peers describes a transport whose options restrict the ranks it
// connects to a peer list (tcp.Options.Peers, shm.Options.Peers), for
// RunPeers.
type Peers struct {
	// Name starts the transport's error messages ("tcp", "shm").
	Name string
	// Listen starts rank's listener in a world of worldSize ranks with
	// the peer list peers, closes it if it started, and returns Listen's
	// error.
	Listen func(ctx context.Context, rank, worldSize int, peers []int) error
	// Connect connects a world of len(peers) ranks, rank r with the peer
	// list peers[r], and fails tb if a rank cannot connect.
	Connect func(tb testing.TB, peers [][]int) []transport.Transport
}

// RunPeers checks what every transport with a peer list does, as subtests
// of t: Listen refuses a bad list naming the rank and the fault
// (Rejected), and a rank outside the list is an error at once on Send and
// Recv, naming it, while the peers, and a rank and itself, talk
// (NotReachable).
func RunPeers(t *testing.T, p Peers) {
	t.Run("Rejected", func(t *testing.T) {
		for _, tc := range []struct {
			name  string
			rank  int
			peers []int
			want  string
		}{
			{"out-of-range", 0, []int{1, 3}, "rank 0: Options.Peers: peer rank 3 out of range [0, 3)"},
			{"negative", 0, []int{-1}, "rank 0: Options.Peers: peer rank -1 out of range [0, 3)"},
			{"self", 1, []int{2, 1}, "rank 1: Options.Peers: lists rank 1, this rank itself"},
			{"twice", 0, []int{2, 1, 2}, "rank 0: Options.Peers: lists rank 2 twice"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				err := p.Listen(context.Background(), tc.rank, 3, tc.peers)
				if err == nil {
					t.Fatal("Listen succeeded")
				}
				if want := p.Name + ": " + tc.want; err.Error() != want {
					t.Fatalf("error %q, want %q", err, want)
				}
			})
		}
	})
	t.Run("NotReachable", func(t *testing.T) {
		ts := p.Connect(t, [][]int{{1}, {0}, {}})
		defer func() {
			for _, tr := range ts {
				tr.Close()
			}
		}()
		ctx := ctxT(t)
		for _, c := range []struct{ from, to int }{{0, 2}, {2, 0}, {2, 1}} {
			want := fmt.Sprintf("%s: rank %d: send to rank %d: not a peer of this transport", p.Name, c.from, c.to)
			if err := ts[c.from].Send(ctx, c.to, transport.Tag{}, []byte{1}); err == nil || !strings.HasPrefix(err.Error(), want) {
				t.Errorf("Send from %d to %d: %v, want %q", c.from, c.to, err, want)
			}
			want = fmt.Sprintf("%s: rank %d: recv from rank %d: not a peer of this transport", p.Name, c.from, c.to)
			if err := ts[c.from].Recv(ctx, c.to, transport.Tag{}, []byte{1}); err == nil || !strings.HasPrefix(err.Error(), want) {
				t.Errorf("Recv of %d from %d: %v, want %q", c.from, c.to, err, want)
			}
		}
		must(t, ts[0].Send(ctx, 1, transport.Tag{Seq: 1}, []byte("hi")))
		b := make([]byte, 2)
		must(t, ts[1].Recv(ctx, 0, transport.Tag{Seq: 1}, b))
		must(t, ts[2].Send(ctx, 2, transport.Tag{Seq: 2}, []byte("me")))
		must(t, ts[2].Recv(ctx, 2, transport.Tag{Seq: 2}, b))
		if string(b) != "me" {
			t.Fatalf("got %q", b)
		}
	})
}

// Connected returns a world's transports as transport.Transports once
// every rank has connected (errs[r] == nil); otherwise it closes those
// that did and fails tb naming the first rank that did not.
func Connected[T transport.Transport](tb testing.TB, ts []T, errs []error) []transport.Transport {
	tb.Helper()
	out := make([]transport.Transport, len(ts))
	for r, err := range errs {
		if err != nil {
			for q, tr := range ts {
				if errs[q] == nil {
					tr.Close()
				}
			}
			tb.Fatalf("rank %d: %v", r, err)
		}
		out[r] = ts[r]
	}
	return out
}
