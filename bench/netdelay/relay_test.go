package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"slices"
	"testing"
	"time"
)

// bound is how long any single wait of these tests may take.
const bound = 10 * time.Second

// listen returns a loopback listener closed when the test ends.
func listen(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

// startRelay serves r on loopback in front of upstream and returns its
// address; the relay stops when the test ends, and the test fails if it
// has not returned within bound.
func startRelay(t *testing.T, r *Relay, upstream string) string {
	t.Helper()
	r.Upstream = upstream
	ln := listen(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Serve: %v", err)
			}
		case <-time.After(bound):
			t.Errorf("Serve did not return within %v of its context's end", bound)
		}
	})
	return ln.Addr().String()
}

// accept returns ln's next connection, or fails the test after bound.
func accept(t *testing.T, ln net.Listener) *net.TCPConn {
	t.Helper()
	ln.(*net.TCPListener).SetDeadline(time.Now().Add(bound))
	c, err := ln.Accept()
	if err != nil {
		t.Fatalf("accept: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c.(*net.TCPConn)
}

func dial(t *testing.T, addr string) *net.TCPConn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, bound)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(bound))
	return c.(*net.TCPConn)
}

// relayed dials through a relay of r in front of a fresh upstream and
// returns both ends.
func relayed(t *testing.T, r *Relay) (client, server *net.TCPConn) {
	t.Helper()
	up := listen(t)
	client = dial(t, startRelay(t, r, up.Addr().String()))
	server = accept(t, up)
	server.SetDeadline(time.Now().Add(bound))
	return client, server
}

// Bytes arrive intact and in order both ways, half-closes included: the
// upstream echoes until the client's EOF, then half-closes in turn.
func TestRelayEcho(t *testing.T) {
	for _, tc := range []struct {
		name       string
		size       int
		chunkBytes int
		queueBytes int
	}{
		{"empty", 0, 0, 0},
		{"one-byte", 1, 0, 0},
		{"1MiB+3", 1<<20 + 3, 0, 0},
		{"1MiB+3/small-queue", 1<<20 + 3, 1000, 3000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client, server := relayed(t, &Relay{Delay: time.Millisecond, ChunkBytes: tc.chunkBytes, QueueBytes: tc.queueBytes})
			go func() {
				io.Copy(server, server)
				server.CloseWrite()
			}()
			want := make([]byte, tc.size)
			rng := rand.New(rand.NewPCG(1, uint64(tc.size)))
			for i := range want {
				want[i] = byte(rng.Uint32())
			}
			werr := make(chan error, 1)
			go func() {
				_, err := client.Write(want)
				if err == nil {
					err = client.CloseWrite()
				}
				werr <- err
			}()
			got, err := io.ReadAll(client)
			if err != nil {
				t.Fatalf("read: %v", err)
			}
			if err := <-werr; err != nil {
				t.Fatalf("write: %v", err)
			}
			if !bytes.Equal(got, want) {
				i := 0
				for i < min(len(got), len(want)) && got[i] == want[i] {
					i++
				}
				t.Fatalf("echo of %d bytes: got %d bytes, first difference at byte %d", len(want), len(got), i)
			}
		})
	}
}

// A ping-pong's round trip takes at least twice the delay, and not much
// more on a loopback.
func TestRelayRoundTrip(t *testing.T) {
	const delay = 5 * time.Millisecond
	client, server := relayed(t, &Relay{Delay: delay})
	go func() {
		var b [8]byte
		for {
			if _, err := io.ReadFull(server, b[:]); err != nil {
				return
			}
			if _, err := server.Write(b[:]); err != nil {
				return
			}
		}
	}()
	var rtts []time.Duration
	var b [8]byte
	for i := range 20 {
		b[0] = byte(i)
		start := time.Now()
		if _, err := client.Write(b[:]); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(client, b[:]); err != nil {
			t.Fatal(err)
		}
		rtt := time.Since(start)
		if b[0] != byte(i) {
			t.Fatalf("round trip %d: got ping %d back", i, b[0])
		}
		if rtt < 2*delay {
			t.Errorf("round trip %d took %v, under twice the delay %v", i, rtt, delay)
		}
		rtts = append(rtts, rtt)
	}
	slices.Sort(rtts)
	// loose: the machine may be loaded; a relay that queued its chunks
	// behind one another would still fail it
	if med := rtts[len(rtts)/2]; med > 2*delay+100*time.Millisecond {
		t.Errorf("median round trip %v, want about %v", med, 2*delay)
	}
	t.Logf("round trips through a %v relay: min %v median %v max %v", delay, rtts[0], rtts[len(rtts)/2], rtts[len(rtts)-1])
}

// A bulk transfer is not held to a chunk per delay: 64 MiB through a 5 ms
// relay, which would take 1024 × 5 ms = 5.1 s one 64 KiB chunk at a time,
// ends far sooner.
func TestRelayThroughput(t *testing.T) {
	const (
		delay = 5 * time.Millisecond
		size  = 64 << 20
	)
	client, server := relayed(t, &Relay{Delay: delay})
	stopAndWait := time.Duration(size/DefaultChunkBytes) * delay
	buf := make([]byte, 1<<20)
	start := time.Now()
	werr := make(chan error, 1)
	go func() {
		var err error
		for sent := 0; sent < size && err == nil; sent += len(buf) {
			_, err = client.Write(buf)
		}
		if err == nil {
			err = client.CloseWrite()
		}
		werr <- err
	}()
	n, err := io.CopyBuffer(io.Discard, server, make([]byte, 1<<20))
	elapsed := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	if err := <-werr; err != nil {
		t.Fatal(err)
	}
	if n != size {
		t.Fatalf("received %d bytes of %d", n, size)
	}
	if elapsed < delay {
		t.Errorf("64 MiB arrived in %v, under the delay %v", elapsed, delay)
	}
	if elapsed > stopAndWait/2 {
		t.Errorf("64 MiB through a %v relay took %v; a chunk per delay would take %v", delay, elapsed, stopAndWait)
	}
	t.Logf("64 MiB through a %v relay: %v (%.2f Gbit/s)", delay, elapsed, float64(size)*8/elapsed.Seconds()/1e9)
}

// A peer's close reaches the other peer (no sooner than the delay), and a
// reset resets the other side; either way the relayed connection ends.
func TestRelayClose(t *testing.T) {
	const delay = 20 * time.Millisecond
	t.Run("client-closes", func(t *testing.T) {
		client, server := relayed(t, &Relay{Delay: delay})
		start := time.Now()
		client.Close()
		if n, err := server.Read(make([]byte, 1)); n != 0 || err != io.EOF {
			t.Fatalf("upstream read after the client's close: %d bytes, %v; want EOF", n, err)
		}
		if el := time.Since(start); el < delay {
			t.Errorf("close arrived after %v, under the delay %v", el, delay)
		}
	})
	t.Run("server-closes", func(t *testing.T) {
		client, server := relayed(t, &Relay{Delay: delay})
		server.Write([]byte("bye"))
		server.Close()
		got, err := io.ReadAll(client)
		if err != nil || string(got) != "bye" {
			t.Fatalf("client read %q, %v; want \"bye\" then EOF", got, err)
		}
	})
	t.Run("server-resets", func(t *testing.T) {
		client, server := relayed(t, &Relay{Delay: delay})
		server.SetLinger(0)
		server.Close()
		if _, err := io.ReadAll(client); err == nil {
			t.Fatal("client read EOF after the upstream's reset; want an error")
		}
	})
	t.Run("upstream-refuses", func(t *testing.T) {
		ln := listen(t)
		addr := ln.Addr().String()
		ln.Close() // nothing listens there now
		c, err := net.DialTimeout("tcp", startRelay(t, &Relay{Delay: delay}, addr), bound)
		if err != nil {
			return // reset before the dial returned
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(bound))
		if n, err := c.Read(make([]byte, 1)); n != 0 || err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("client read %d bytes, %v; want the connection reset", n, err)
		}
	})
	t.Run("not-redirected", func(t *testing.T) {
		// no --upstream and no netfilter redirect: the relay refuses
		client := dial(t, startRelay(t, &Relay{Delay: delay}, ""))
		if n, err := client.Read(make([]byte, 1)); n != 0 || err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("client read %d bytes, %v; want the connection closed", n, err)
		}
	})
}

// pipe returns, with all its goroutines ended, once both peers have
// closed (cleanly or not), without the relay's context ending.
func TestPipeEnds(t *testing.T) {
	for _, tc := range []struct {
		name  string
		close func(x, y *net.TCPConn)
	}{
		{"both-close", func(x, y *net.TCPConn) { x.Close(); y.Close() }},
		{"half-closes", func(x, y *net.TCPConn) { x.CloseWrite(); y.CloseWrite() }},
		{"one-resets", func(x, y *net.TCPConn) { x.SetLinger(0); x.Close() }},
		{"one-closes-other-writes", func(x, y *net.TCPConn) {
			x.Close()
			// y's bytes hit x's closed socket: a reset, which ends the
			// pipe and resets y, ending this loop (else y's deadline does)
			y.SetDeadline(time.Now().Add(bound))
			for {
				if _, err := y.Write(make([]byte, 1<<10)); err != nil {
					return
				}
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pair := func() (*net.TCPConn, *net.TCPConn) {
				ln := listen(t)
				return dial(t, ln.Addr().String()), accept(t, ln)
			}
			x, a := pair()
			b, y := pair()
			r := &Relay{Delay: time.Millisecond}
			done := make(chan error, 1)
			go func() { done <- r.pipe(context.Background(), a, b) }()
			tc.close(x, y)
			select {
			case err := <-done:
				t.Logf("pipe: %v", err)
			case <-time.After(bound):
				t.Fatalf("pipe still running %v after its peers closed", bound)
			}
		})
	}
}

func TestRelayValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		r    Relay
		ok   bool
	}{
		{"zero", Relay{}, true},
		{"negative-delay", Relay{Delay: -1}, false},
		{"queue-under-chunk", Relay{QueueBytes: 10, ChunkBytes: 100}, false},
		{"queue-one-chunk", Relay{QueueBytes: 100, ChunkBytes: 100}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.r.validate(); (err == nil) != tc.ok {
				t.Errorf("validate() = %v, want ok %v", err, tc.ok)
			}
		})
	}
}

// The command refuses bad flags (2), and serves until its context ends (0).
func TestRun(t *testing.T) {
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tc := range []struct {
		name string
		args []string
		want int
	}{
		{"queue-under-chunk", []string{"--queue", "10", "--chunk", "100"}, 2},
		{"negative-delay", []string{"--delay", "-1ms"}, 2},
		{"arguments", []string{"extra"}, 2},
		{"unknown-flag", []string{"--rate", "1gbit"}, 2},
		{"serves", []string{"--listen", "127.0.0.1:0", "--delay", "1ms"}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			if got := run(ended, tc.args, &out); got != tc.want {
				t.Errorf("run(%q) = %d, want %d; output:\n%s", tc.args, got, tc.want, out.String())
			}
		})
	}
}
