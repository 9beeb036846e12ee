package tcpstore_test

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cohortml/cohort/distributed/internal/logtest"
	"github.com/cohortml/cohort/distributed/store"
	"github.com/cohortml/cohort/distributed/store/storetest"
	"github.com/cohortml/cohort/distributed/store/tcpstore"
)

func quietLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

func startServer(t *testing.T, opts tcpstore.Options) *tcpstore.Server {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = quietLogger()
	}
	srv, err := tcpstore.Listen("127.0.0.1:0", opts)
	if err != nil {
		t.Fatalf("Listen: %v", err)
	}
	t.Cleanup(func() { srv.Close() })
	return srv
}

func dial(t *testing.T, srv *tcpstore.Server, opts tcpstore.Options) *tcpstore.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := tcpstore.Dial(ctx, srv.Addr().String(), opts)
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestConformance(t *testing.T) {
	const token = "conformance-secret"
	storetest.Run(t, func(t *testing.T) storetest.Opener {
		srv := startServer(t, tcpstore.Options{Token: token})
		return func(t *testing.T) store.Store {
			return dial(t, srv, tcpstore.Options{Token: token})
		}
	})
}

func TestAuthentication(t *testing.T) {
	tests := []struct {
		name        string
		serverToken string
		clientToken string
		wantErr     bool
		wantLog     string // substring of the server's log line
		wantMsg     string // substring of the client's error
	}{
		{"same-token", "s3cret", "s3cret", false, "", ""},
		{"both-empty", "", "", false, "", ""},
		{"wrong-token", "s3cret", "guess", true, "token does not match", "refused"},
		{"missing-token", "s3cret", "", true, "client has no token", "this client has no token"},
		{"server-without-token", "", "s3cret", true, "server has none", "refused"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var logs logtest.Buffer
			srv := startServer(t, tcpstore.Options{Token: tc.serverToken, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			c, err := tcpstore.Dial(ctx, srv.Addr().String(), tcpstore.Options{Token: tc.clientToken})
			if !tc.wantErr {
				if err != nil {
					t.Fatalf("Dial: %v", err)
				}
				defer c.Close()
				if err := c.Set(ctx, "k", []byte("v")); err != nil {
					t.Fatalf("Set after authenticating: %v", err)
				}
				return
			}
			if err == nil {
				c.Close()
				t.Fatal("Dial succeeded; want the server to refuse the token")
			}
			if !errors.Is(err, tcpstore.ErrAuth) {
				t.Errorf("Dial error %q does not wrap ErrAuth", err)
			}
			if !strings.Contains(err.Error(), tc.wantMsg) || !strings.Contains(err.Error(), srv.Addr().String()) {
				t.Errorf("Dial error %q should contain %q and the server address", err, tc.wantMsg)
			}
			// The refusal is logged before the verdict is sent, so the
			// line is there by the time Dial returns.
			log := logs.String()
			if !strings.Contains(log, "refused connection") || !strings.Contains(log, tc.wantLog) || !strings.Contains(log, "127.0.0.1:") {
				t.Errorf("server log %q should report the refusal (%q) and the peer address", log, tc.wantLog)
			}
		})
	}
}

// TestServerRejectsProof checks the client side of mutual authentication:
// a fake server that accepts any client but cannot compute the proof is
// rejected before the client sends any command.
func TestServerRejectsProof(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		defer conn.Close()
		hello := append([]byte("COHORT-STORE\x01"), make([]byte, 32)...)
		writeRaw(conn, hello)
		buf := make([]byte, 4+13+2+64)
		conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := readFull(conn, buf); err != nil {
			return
		}
		writeRaw(conn, append([]byte{0}, make([]byte, 32)...)) // "accepted", bogus proof
		conn.Read(make([]byte, 1))                             // wait for the client to hang up
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := tcpstore.Dial(ctx, ln.Addr().String(), tcpstore.Options{Token: "t"})
	if err == nil {
		c.Close()
		t.Fatal("Dial accepted a server that could not prove the token")
	}
	if !errors.Is(err, tcpstore.ErrAuth) || !strings.Contains(err.Error(), "could not prove") {
		t.Fatalf("Dial = %v; want an ErrAuth about the server's proof", err)
	}
	ln.Close()
	wg.Wait()
}

func writeRaw(conn net.Conn, payload []byte) {
	hdr := []byte{byte(len(payload) >> 24), byte(len(payload) >> 16), byte(len(payload) >> 8), byte(len(payload))}
	conn.Write(append(hdr, payload...))
}

func readFull(conn net.Conn, buf []byte) (int, error) {
	n := 0
	for n < len(buf) {
		m, err := conn.Read(buf[n:])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// TestHostilePeers sends what a port scanner, a confused program or an
// attacker without the token might, and checks the server drops it, logs
// it, stays up, and never allocates for a declared length.
func TestHostilePeers(t *testing.T) {
	tests := []struct {
		name    string
		send    []byte
		wantLog string
	}{
		{"http", []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"), "handshake failed"},
		{"huge-length", []byte{0xff, 0xff, 0xff, 0xff, 1, 2, 3}, "frame too large"},
		{"bad-magic", append([]byte{0, 0, 0, 10}, "NOT-COHORT"...), "not a cohort store client"},
		{"truncated", []byte{0, 0, 0, 80, 'C', 'O'}, "handshake failed"},
	}
	var logs logtest.Buffer
	srv := startServer(t, tcpstore.Options{Token: "t", HandshakeTimeout: 2 * time.Second, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			conn, err := net.Dial("tcp", srv.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			conn.Write(tc.send)
			if tc.name == "truncated" {
				conn.(*net.TCPConn).CloseWrite()
			}
			// The server must hang up on us (after its greeting).
			conn.SetReadDeadline(time.Now().Add(5 * time.Second))
			buf := make([]byte, 1024)
			for {
				_, err := conn.Read(buf)
				if err != nil {
					var ne net.Error
					if errors.As(err, &ne) && ne.Timeout() {
						t.Fatal("server kept a hostile connection open")
					}
					break
				}
			}
		})
	}
	// The server logs before it hangs up, so every line is there now.
	log := logs.String()
	for _, tc := range tests {
		if !strings.Contains(log, tc.wantLog) {
			t.Errorf("server log lacks %q for peer %s:\n%s", tc.wantLog, tc.name, log)
		}
	}
	// The server still serves honest clients.
	c := dial(t, srv, tcpstore.Options{Token: "t"})
	ctx := context.Background()
	if err := c.Set(ctx, "still", []byte("up")); err != nil {
		t.Fatalf("Set after hostile peers: %v", err)
	}
}

// TestAuthenticatedGarbage checks that a peer holding the token but
// sending a malformed command is dropped, not trusted.
func TestAuthenticatedGarbage(t *testing.T) {
	var logs logtest.Buffer
	srv := startServer(t, tcpstore.Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	conn, err := net.Dial("tcp", srv.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := tcpstore.ClientHandshakeForTest(conn, ""); err != nil {
		t.Fatalf("handshake: %v", err)
	}
	// A set request whose key length claims 4 GiB inside a 20-byte frame.
	frame := []byte{0, 0, 0, 20, 1, 0, 0, 0, 0, 0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0}
	conn.Write(frame)
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := conn.Read(make([]byte, 1)); err == nil {
		t.Fatal("server answered a malformed request instead of hanging up")
	}
	// Logged before the hang-up.
	if log := logs.String(); !strings.Contains(log, "dropped connection") || !strings.Contains(log, "exceeds the") {
		t.Fatalf("server log %q should report the malformed request", log)
	}
}

// waitFor polls a condition that has no event to wait on (a server-side
// counter), bounded by 5 s.
func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestCancelledWaitersReleased checks that Get calls abandoned by their
// callers are withdrawn on the server, so a long-lived client retrying
// with short timeouts does not pile up parked requests.
func TestCancelledWaitersReleased(t *testing.T) {
	srv := startServer(t, tcpstore.Options{})
	c := dial(t, srv, tcpstore.Options{})
	for range 50 {
		ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
		c.Get(ctx, "never")
		cancel()
	}
	waitFor(t, func() bool { return tcpstore.ServerWaiters(srv) == 0 }, "parked requests to be withdrawn")
}

// TestServerCloseFailsClients checks a client blocked on a server that
// shuts down gets store.ErrClosed, and so do its later calls.
func TestServerCloseFailsClients(t *testing.T) {
	srv := startServer(t, tcpstore.Options{})
	c := dial(t, srv, tcpstore.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	errc := make(chan error, 1)
	go func() {
		_, err := c.Get(ctx, "never")
		errc <- err
	}()
	waitFor(t, func() bool { return tcpstore.ServerWaiters(srv) == 1 }, "the Get to park on the server")
	if err := srv.Close(); err != nil {
		t.Fatalf("server Close: %v", err)
	}
	if err := <-errc; !errors.Is(err, store.ErrClosed) || !strings.Contains(err.Error(), "never") {
		t.Fatalf("blocked Get across server Close = %v; want store.ErrClosed naming the key", err)
	}
	waitFor(t, func() bool {
		err := c.Set(ctx, "k", nil)
		return errors.Is(err, store.ErrClosed)
	}, "calls after the server closed to fail with store.ErrClosed")
}

func TestOversizedValueRefusedByClient(t *testing.T) {
	srv := startServer(t, tcpstore.Options{MaxFrameBytes: 1024})
	c := dial(t, srv, tcpstore.Options{MaxFrameBytes: 1024})
	ctx := context.Background()
	err := c.Set(ctx, "big", make([]byte, 2048))
	if err == nil || !strings.Contains(err.Error(), "frame limit") {
		t.Fatalf("Set of 2 KiB with a 1 KiB frame limit = %v; want a frame-limit error", err)
	}
	// The connection is intact.
	if err := c.Set(ctx, "small", []byte("ok")); err != nil {
		t.Fatalf("Set after a refused oversized Set: %v", err)
	}
}

func TestOptionsValidate(t *testing.T) {
	tests := []struct {
		name string
		opts tcpstore.Options
		want string
	}{
		{"negative-frame", tcpstore.Options{MaxFrameBytes: -1}, "MaxFrameBytes"},
		{"tiny-frame", tcpstore.Options{MaxFrameBytes: 8}, "at least 64"},
		{"huge-frame", tcpstore.Options{MaxFrameBytes: 1 << 33}, "MaxFrameBytes"},
		{"negative-timeout", tcpstore.Options{WriteTimeout: -time.Second}, "WriteTimeout"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv, err := tcpstore.Listen("127.0.0.1:0", tc.opts)
			if err == nil {
				srv.Close()
				t.Fatal("Listen accepted invalid options")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not mention %q", err, tc.want)
			}
		})
	}
}

// TestNoGoroutineLeaks: after clients with parked, cancelled and
// completed calls and the server are closed, every goroutine they
// started has ended.
func TestNoGoroutineLeaks(t *testing.T) {
	before := runtime.NumGoroutine()
	srv, err := tcpstore.Listen("127.0.0.1:0", tcpstore.Options{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var clients []*tcpstore.Client
	var wg sync.WaitGroup
	for i := range 4 {
		c, err := tcpstore.Dial(ctx, srv.Addr().String(), tcpstore.Options{})
		if err != nil {
			t.Fatal(err)
		}
		clients = append(clients, c)
		c.Set(ctx, "k", []byte("v"))
		short, cancel := context.WithTimeout(ctx, time.Millisecond)
		c.Get(short, "never")
		cancel()
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.Wait(ctx, "never", strconv.Itoa(i)) // parked until Close
		}()
	}
	waitFor(t, func() bool { return tcpstore.ServerWaiters(srv) == 4 }, "four parked waits")
	for i, c := range clients {
		if i%2 == 0 {
			c.Close() // half closed by the client, half by the server going away
		}
	}
	srv.Close()
	for _, c := range clients {
		c.Close()
	}
	wg.Wait()
	waitFor(t, func() bool { return runtime.NumGoroutine() <= before }, "goroutines to return to the baseline")
}

// TestServerFloodOfStalledConnections: connections that open and never
// finish the handshake cost the server a bounded number of descriptors,
// are logged a few lines at a time, and never keep an honest client out.
func TestServerFloodOfStalledConnections(t *testing.T) {
	var logs logtest.Buffer
	srv := startServer(t, tcpstore.Options{Token: "t", HandshakeTimeout: 30 * time.Second, MaxPendingConns: 32,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	const flood = 600
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	defer func() {
		close(stop)
		wg.Wait()
		for _, c := range conns {
			c.Close()
		}
	}()
	// The flood keeps going while the honest client connects.
	wg.Go(func() {
		for i := 0; i < flood; i++ {
			select {
			case <-stop:
				return
			default:
			}
			c, err := net.Dial("tcp", srv.Addr().String())
			if err != nil {
				continue
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	})
	for i := range 5 {
		// A handshake that the flood outpaces is evicted like a staller;
		// the client retries, as rendezvous.Dial does.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		var c *tcpstore.Client
		var err error
		for tries := 0; ctx.Err() == nil; tries++ {
			if c, err = tcpstore.Dial(ctx, srv.Addr().String(), tcpstore.Options{Token: "t"}); err == nil {
				break
			}
			time.Sleep(time.Duration(tries) * time.Millisecond)
		}
		cancel()
		if err != nil {
			t.Fatalf("honest client %d during the flood: %v", i, err)
		}
		if err := c.Set(context.Background(), "k", []byte("v")); err != nil {
			t.Fatalf("honest client %d: Set: %v", i, err)
		}
		c.Close()
	}
	wg.Wait()
	// Every stalled connection beyond the cap has been closed by the
	// server: reading it ends promptly.
	mu.Lock()
	open := 0
	for _, c := range conns[:max(len(conns)-64, 0)] {
		c.SetReadDeadline(time.Now().Add(2 * time.Second))
		buf := make([]byte, 256)
		for {
			if _, err := c.Read(buf); err != nil {
				var ne net.Error
				if errors.As(err, &ne) && ne.Timeout() {
					open++
				}
				break
			}
		}
	}
	mu.Unlock()
	if open > 0 {
		t.Errorf("%d old stalled connections still held by the server, want 0 (cap 32)", open)
	}
	if n := strings.Count(logs.String(), "\n"); n > 20 {
		t.Errorf("server logged %d lines for a flood of %d connections, want a few:\n%s", n, flood, logs.String())
	}
}
