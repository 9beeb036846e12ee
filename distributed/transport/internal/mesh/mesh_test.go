package mesh

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cohortml/cohort/distributed/transport"
	"github.com/cohortml/cohort/distributed/transport/internal/handshake"
	"github.com/cohortml/cohort/distributed/wire"
)

// world starts listeners for ranks 0..n-1 on loopback and returns their
// addresses and a Config builder.
type world struct {
	lns   []net.Listener
	addrs []string
	token []byte
}

func newWorld(t *testing.T, n int, token string) *world {
	t.Helper()
	w := &world{token: []byte(token)}
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		w.lns = append(w.lns, ln)
		w.addrs = append(w.addrs, ln.Addr().String())
	}
	return w
}

func (w *world) config(rank int) Config {
	return Config{
		Handshake: handshake.Config{Label: "mesh-test/1", Token: w.token, Rank: rank, WorldSize: len(w.lns)},
		Listener:  w.lns[rank],
		Dial: func(ctx context.Context, peer int) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "tcp", w.addrs[peer])
		},
		HandshakeTimeout: 5 * time.Second,
		Logger:           slog.New(slog.DiscardHandler),
		Name:             "test",
	}
}

// connectAll runs Connect on the given ranks concurrently.
func connectAll(ctx context.Context, w *world, ranks []int) ([][]net.Conn, []error) {
	conns := make([][]net.Conn, len(w.lns))
	errs := make([]error, len(w.lns))
	var wg sync.WaitGroup
	for _, r := range ranks {
		wg.Go(func() { conns[r], errs[r] = Connect(ctx, w.config(r)) })
	}
	wg.Wait()
	return conns, errs
}

func closeAll(conns [][]net.Conn) {
	for _, cs := range conns {
		for _, c := range cs {
			if c != nil {
				c.Close()
			}
		}
	}
}

func checkFull(t *testing.T, conns [][]net.Conn, errs []error) {
	t.Helper()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
		for p, c := range conns[r] {
			if (c == nil) != (p == r) {
				t.Fatalf("rank %d: connection to rank %d is %v", r, p, c)
			}
		}
	}
}

func TestConnectWorlds(t *testing.T) {
	for _, n := range []int{1, 2, 3, 5} {
		t.Run(fmt.Sprintf("world=%d", n), func(t *testing.T) {
			w := newWorld(t, n, "secret")
			ranks := make([]int, n)
			for i := range ranks {
				ranks[i] = i
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			conns, errs := connectAll(ctx, w, ranks)
			defer closeAll(conns)
			checkFull(t, conns, errs)
			// The pair (0, n-1) carries bytes both ways.
			if n > 1 {
				go conns[n-1][0].Write([]byte("hi"))
				buf := make([]byte, 2)
				if _, err := io.ReadFull(conns[0][n-1], buf); err != nil || string(buf) != "hi" {
					t.Fatalf("read %q, %v", buf, err)
				}
			}
		})
	}
}

// sendHello opens a connection to addr and introduces itself as rank from
// to rank to, then does nothing more.
func sendHello(t *testing.T, addr string, from, to, world int) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	h := wire.Hello{Rank: uint32(from), WorldSize: uint32(world), Peer: uint32(to)}
	if err := wire.WriteFrame(c, wire.Header{Kind: wire.KindHello}, h.Append(nil)); err != nil {
		t.Fatal(err)
	}
	return c
}

// TestImpostorsDoNotTakeTheSlot: connections that claim rank 1 and then
// stall, or that do not hold the token, arrive before the real rank 1; the
// real rank 1 still connects.
func TestImpostorsDoNotTakeTheSlot(t *testing.T) {
	for _, token := range []string{"secret", ""} {
		t.Run("token="+token, func(t *testing.T) {
			w := newWorld(t, 2, token)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			var rank0 []net.Conn
			var err0 error
			done := make(chan struct{})
			go func() { rank0, err0 = Connect(ctx, w.config(0)); close(done) }()
			stalled := sendHello(t, w.addrs[0], 1, 0, 2)
			defer stalled.Close()
			if token != "" {
				// A dialer with the wrong token is refused.
				c, err := net.Dial("tcp", w.addrs[0])
				if err != nil {
					t.Fatal(err)
				}
				hsErr := handshake.Dial(c, handshake.Config{Label: "mesh-test/1", Token: []byte("wrong"), Rank: 1, WorldSize: 2}, 0, 0)
				c.Close()
				if !errors.Is(hsErr, transport.ErrAuth) {
					t.Fatalf("wrong-token dialer: %v, want an authentication refusal", hsErr)
				}
			}
			time.Sleep(20 * time.Millisecond) // let the impostors reach the acceptor first
			rank1, err1 := Connect(ctx, w.config(1))
			<-done
			defer closeAll([][]net.Conn{rank0, rank1})
			checkFull(t, [][]net.Conn{rank0, rank1}, []error{err0, err1})
		})
	}
}

// TestMissingRankNamed: a rank that never comes is named when ctx ends.
func TestMissingRankNamed(t *testing.T) {
	w := newWorld(t, 3, "")
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	conns, errs := connectAll(ctx, w, []int{0, 1})
	defer closeAll(conns)
	for r := range 2 {
		if errs[r] == nil || !strings.Contains(errs[r].Error(), "rank(s) 2") {
			t.Errorf("rank %d: %v, want an error naming rank 2", r, errs[r])
		}
	}
}

func TestPeers(t *testing.T) {
	for _, tc := range []struct {
		rank, world int
		in          []int
		want        string
	}{
		{0, 3, nil, "[1 2]"},
		{1, 3, []int{2, 0}, "[0 2]"},
		{1, 3, []int{}, "[]"},
		{1, 3, []int{1}, "this rank itself"},
		{1, 3, []int{3}, "out of range"},
		{0, 3, []int{2, 2}, "twice"},
	} {
		got, err := Peers(tc.rank, tc.world, tc.in)
		s := ""
		if err != nil {
			s = err.Error()
		} else {
			s = fmt.Sprint(got)
		}
		if !strings.Contains(s, tc.want) {
			t.Errorf("Peers(%d, %d, %v) = %q, want %q", tc.rank, tc.world, tc.in, s, tc.want)
		}
	}
}
