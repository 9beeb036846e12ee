package handshake

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/cohortml/cohort/distributed/transport"
)

type result struct {
	rank, conn int
	err        error
}

func run(t *testing.T, dial, acc Config, peer, connIdx int, check func(int, int) error) (dialErr error, accRes result) {
	t.Helper()
	c1, c2 := net.Pipe()
	defer c1.Close()
	defer c2.Close()
	deadline := time.Now().Add(5 * time.Second)
	c1.SetDeadline(deadline)
	c2.SetDeadline(deadline)
	if check == nil {
		check = func(int, int) error { return nil }
	}
	done := make(chan result, 1)
	go func() {
		r, c, err := Accept(c2, acc, check, nil)
		if err != nil {
			c2.Close() // as a transport would: the dialer sees the refusal, then EOF
		}
		done <- result{r, c, err}
	}()
	dialErr = Dial(c1, dial, peer, connIdx)
	if dialErr != nil {
		c1.Close()
	}
	return dialErr, <-done
}

func TestHandshake(t *testing.T) {
	cfg := func(rank, world int, token string) Config {
		return Config{Label: "test/1", Token: []byte(token), Rank: rank, WorldSize: world}
	}
	tests := []struct {
		name      string
		dial, acc Config
		peer      int
		check     func(int, int) error
		dialErr   string // substring; empty for success
		accErr    string
		auth      bool // both errors wrap transport.ErrAuth
	}{
		{name: "no-token", dial: cfg(3, 4, ""), acc: cfg(1, 4, ""), peer: 1},
		{name: "same-token", dial: cfg(3, 4, "s3cret"), acc: cfg(1, 4, "s3cret"), peer: 1},
		{name: "wrong-token", dial: cfg(3, 4, "guess"), acc: cfg(1, 4, "s3cret"), peer: 1,
			dialErr: "authentication failed", accErr: "authentication failed", auth: true},
		{name: "dialer-without-token", dial: cfg(3, 4, ""), acc: cfg(1, 4, "s3cret"), peer: 1,
			dialErr: "authentication failed", accErr: "authentication failed", auth: true},
		{name: "acceptor-without-token", dial: cfg(3, 4, "s3cret"), acc: cfg(1, 4, ""), peer: 1,
			dialErr: "rank 1: transport: authentication failed", accErr: "authentication failed", auth: true},
		{name: "world-mismatch", dial: cfg(3, 4, ""), acc: cfg(1, 8, ""), peer: 1,
			dialErr: "refused by rank 1: handshake: rank 3 has world size 4, this rank (1) has 8",
			accErr:  "rank 3 has world size 4"},
		{name: "wrong-address", dial: cfg(3, 4, ""), acc: cfg(2, 4, ""), peer: 1,
			dialErr: "dialed rank 1 at the address of rank 2", accErr: "dialed rank 1"},
		{name: "rank-out-of-range", dial: cfg(9, 4, ""), acc: cfg(1, 4, ""), peer: 1,
			dialErr: "rank 9 out of range [0, 4)", accErr: "out of range"},
		{name: "check-refuses", dial: cfg(3, 4, ""), acc: cfg(1, 4, ""), peer: 1,
			check:   func(r, c int) error { return fmt.Errorf("rank %d already connected", r) },
			dialErr: "refused by rank 1: rank 3 already connected", accErr: "already connected"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dialErr, acc := run(t, tc.dial, tc.acc, tc.peer, 2, tc.check)
			if tc.dialErr == "" {
				if dialErr != nil || acc.err != nil {
					t.Fatalf("dial: %v; accept: %v", dialErr, acc.err)
				}
				if acc.rank != tc.dial.Rank || acc.conn != 2 {
					t.Fatalf("acceptor saw rank %d conn %d", acc.rank, acc.conn)
				}
				return
			}
			if dialErr == nil || !strings.Contains(dialErr.Error(), tc.dialErr) {
				t.Errorf("dial error %v, want it to contain %q", dialErr, tc.dialErr)
			}
			if acc.err == nil || !strings.Contains(acc.err.Error(), tc.accErr) {
				t.Errorf("accept error %v, want it to contain %q", acc.err, tc.accErr)
			}
			if tc.auth && (!errors.Is(dialErr, transport.ErrAuth) || !errors.Is(acc.err, transport.ErrAuth)) {
				t.Errorf("errors do not wrap ErrAuth: dial %v; accept %v", dialErr, acc.err)
			}
		})
	}
}

func TestAcceptRejectsGarbage(t *testing.T) {
	c1, c2 := net.Pipe()
	defer c1.Close()
	defer c2.Close()
	c2.SetDeadline(time.Now().Add(5 * time.Second))
	go func() {
		c1.Write([]byte("GET / HTTP/1.1\r\nHost: example\r\n\r\n"))
		c1.Close()
	}()
	_, _, err := Accept(c2, Config{Label: "x", Rank: 0, WorldSize: 2}, func(int, int) error { return nil }, nil)
	if err == nil || !strings.Contains(err.Error(), "not a cohort frame") {
		t.Fatalf("got %v", err)
	}
}
