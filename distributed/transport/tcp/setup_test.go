package tcp

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/cohortml/cohort/distributed/internal/logtest"
	"github.com/cohortml/cohort/distributed/transport"
	"github.com/cohortml/cohort/distributed/transport/transporttest"
	"github.com/cohortml/cohort/distributed/wire"
)

func TestListenRejectsBadArguments(t *testing.T) {
	transporttest.RunBadListen(t, func(ctx context.Context, rank, world int, o Options) (*Listener, error) {
		return Listen(ctx, rank, world, "127.0.0.1:0", o)
	}, []transporttest.BadListen[Options]{
		{Name: "world-zero", Rank: 0, World: 0, Opts: Options{}, Want: "tcp: world size 0, want >= 1"},
		{Name: "rank-negative", Rank: -1, World: 2, Opts: Options{}, Want: "tcp: rank -1 out of range [0, 2)"},
		{Name: "rank-too-high", Rank: 2, World: 2, Opts: Options{}, Want: "tcp: rank 2 out of range [0, 2)"},
		{Name: "chunk-negative", Rank: 0, World: 2, Opts: Options{ChunkBytes: -1}, Want: "tcp: Options.ChunkBytes -1 out of range"},
		{Name: "chunk-huge", Rank: 0, World: 2, Opts: Options{ChunkBytes: 1 << 40}, Want: "tcp: Options.ChunkBytes 1099511627776 out of range"},
		{Name: "timeout-negative", Rank: 0, World: 2, Opts: Options{HandshakeTimeout: -time.Second}, Want: "tcp: Options.HandshakeTimeout -1s is negative"},
	})
}

func TestConnectRejectsBadAddresses(t *testing.T) {
	ctx := context.Background()
	l, err := Listen(ctx, 1, 2, "127.0.0.1:0", Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Connect(ctx, []string{"x"}); err == nil || !strings.Contains(err.Error(), "1 peer addresses for world size 2") {
		t.Fatalf("got %v", err)
	}
	if _, err := l.Connect(ctx, []string{"", "y"}); err == nil || !strings.Contains(err.Error(), "Connect called twice") {
		t.Fatalf("second Connect: %v", err)
	}
	l2, err := Listen(ctx, 1, 2, "127.0.0.1:0", Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l2.Connect(ctx, []string{"", "y"}); err == nil || !strings.Contains(err.Error(), "no address for rank 0") {
		t.Fatalf("got %v", err)
	}
}

func TestWrongTokenRefused(t *testing.T) {
	defer transporttest.CheckGoroutines(t, runtime.NumGoroutine())
	var logs logtest.Buffer
	logger := slog.New(slog.NewTextHandler(&logs, nil))
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	toks := []string{"right", "wrong"}
	ls := transporttest.ListenAll(t, ctx, 2, func(ctx context.Context, r int) (*Listener, error) {
		return Listen(ctx, r, 2, "127.0.0.1:0", Options{Token: []byte(toks[r]), Logger: logger})
	})
	errs := transporttest.ConnectErrors[*Transport](ctx, ls)
	// Rank 1 dials rank 0 and is refused at once.
	if !errors.Is(errs[1], transport.ErrAuth) {
		t.Errorf("dialer: %v, want an error wrapping ErrAuth", errs[1])
	}
	// Rank 0 waits for a rank that never proves itself, then names it.
	if errs[0] == nil || !strings.Contains(errs[0].Error(), "no connection with rank(s) 1 (refused:") ||
		!strings.Contains(errs[0].Error(), "authentication failed") {
		t.Errorf("acceptor: %v", errs[0])
	}
	if !strings.Contains(logs.String(), "refused connection") {
		t.Errorf("refusal not logged; log:\n%s", logs.String())
	}
}

func TestConnectTimeoutNamesMissingRanks(t *testing.T) {
	defer transporttest.CheckGoroutines(t, runtime.NumGoroutine())
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	l, err := Listen(ctx, 0, 3, "127.0.0.1:0", Options{})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = l.Connect(ctx, []string{l.Addr(), "", ""})
	if err == nil || !strings.Contains(err.Error(), "no connection with rank(s) 1, 2") || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("Connect returned %v after its deadline", d)
	}
}

func TestStrayConnectionDuringSetup(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ls := transporttest.ListenAll(t, ctx, 2, func(ctx context.Context, r int) (*Listener, error) {
		return Listen(ctx, r, 2, "127.0.0.1:0", Options{})
	})
	// Garbage and a big bogus length reach rank 0 before rank 1 does.
	for _, junk := range [][]byte{
		[]byte("GET / HTTP/1.1\r\n\r\n................"),
		wire.Header{Kind: wire.KindHello, Length: 1<<32 - 1}.Append(nil),
	} {
		c, err := net.Dial("tcp", ls[0].Addr())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.Write(junk)
	}
	ts, errs := transporttest.ConnectAll[*Transport](ctx, ls)
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
		defer ts[r].Close()
	}
	if err := ts[1].Send(ctx, 0, transport.Tag{}, []byte("hi")); err != nil {
		t.Fatal(err)
	}
	p := make([]byte, 2)
	if err := ts[0].Recv(ctx, 1, transport.Tag{}, p); err != nil || string(p) != "hi" {
		t.Fatalf("%q %v", p, err)
	}
}

func connectPair(t *testing.T, opts Options) (*Transport, *Transport) {
	t.Helper()
	ts, errs := connectWorld(t, 2, func(int) Options { return opts })
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	t.Cleanup(func() { ts[0].Close(); ts[1].Close() })
	return ts[0], ts[1]
}

func TestGarbageFrameBreaksLink(t *testing.T) {
	tests := []struct {
		name  string
		frame []byte
		want  string
	}{
		{"oversized-frame", wire.Header{Kind: wire.KindData, Length: 1<<32 - 1, Aux: 1<<32 - 1}.Append(nil),
			"wire: frame length 4294967295 exceeds limit 67108864"},
		{"oversized-message", wire.Header{Kind: wire.KindData, Length: 0, Aux: 1 << 62}.Append(nil),
			"wire: message length 4611686018427387904 exceeds limit 68719476736"},
		{"bad-magic", bytes.Repeat([]byte{0xAB}, 32), "wire: not a cohort frame"},
		{"stray-continuation", wire.Header{Kind: wire.KindMore, Aux: 5}.Append(nil), "unexpected continuation frame"},
		{"handshake-after-setup", wire.Header{Kind: wire.KindHello}.Append(nil), "unexpected hello frame"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t0, t1 := connectPair(t, Options{})
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- t0.Recv(ctx, 1, transport.Tag{}, make([]byte, 8)) }()
			// Write raw bytes on rank 1's side of the connection.
			l := t1.links[0]
			l.wmu.Lock()
			l.conn.Write(tc.frame)
			l.wmu.Unlock()
			err := <-done
			var pe *transport.PeerError
			if !errors.As(err, &pe) || pe.Peer != 1 || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want a PeerError for rank 1 containing %q", err, tc.want)
			}
		})
	}
}

func TestCancelledLongSendIsAbandoned(t *testing.T) {
	t0, t1 := connectPair(t, Options{ChunkBytes: 64 << 10})
	ctx := context.Background()
	tag := transport.Tag{Group: 1}
	const size = 64 << 20
	got := make(chan error, 1)
	// The receive is posted before the send starts: an abandoned message
	// that no receiver has claimed is dropped without a trace, and a Recv
	// started later would wait for good. Bounded all the same.
	rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
	defer rcancel()
	q, err := t1.links[0].box.Post(tag, make([]byte, size))
	if q == nil {
		t.Fatalf("receive finished before anything was sent: %v", err)
	}
	go func() { got <- q.Wait(rctx) }()
	sctx, cancel := context.WithCancel(ctx)
	sent := make(chan error, 1)
	go func() { sent <- t0.Send(sctx, 1, tag, make([]byte, size)) }()
	time.Sleep(5 * time.Millisecond)
	cancel()
	serr := <-sent
	if serr == nil {
		t.Skip("the send finished before it could be cancelled")
	}
	if !errors.Is(serr, context.Canceled) {
		t.Fatalf("send: %v", serr)
	}
	rerr := <-got
	if errors.Is(rerr, context.DeadlineExceeded) {
		// Cancelled before its first frame went out (the sending goroutine
		// starved past the cancel grace): nothing was sent to abandon.
		t.Skip("the send was cancelled before its first frame")
	}
	if rerr == nil || !strings.Contains(rerr.Error(), "abandoned") {
		t.Fatalf("recv: %v, want the message reported abandoned", rerr)
	}
	// The link survives: a later message goes through.
	if err := t0.Send(ctx, 1, tag, []byte("next")); err != nil {
		t.Fatal(err)
	}
	p := make([]byte, 4)
	if err := t1.Recv(ctx, 0, tag, p); err != nil || string(p) != "next" {
		t.Fatalf("%q %v", p, err)
	}
}
