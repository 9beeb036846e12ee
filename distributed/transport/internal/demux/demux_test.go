package demux

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/cohortml/cohort/distributed/transport"
)

var tagA = transport.Tag{Group: 1, Seq: 1}

func write(t *testing.T, m *Msg, p []byte) {
	t.Helper()
	n, err := m.Write(func(dst []byte) (int, error) { return copy(dst, p), nil })
	if err != nil || n != len(p) {
		t.Fatalf("Write: %d, %v", n, err)
	}
}

// recvAsync starts a Recv and returns its result channel once the
// receiver is registered.
func recvAsync(t *testing.T, b *Box, ctx context.Context, p []byte) <-chan error {
	t.Helper()
	_, w0 := b.Pending()
	done := make(chan error, 1)
	go func() { done <- b.Recv(ctx, tagA, p) }()
	for deadline := time.Now().Add(5 * time.Second); ; {
		if _, w := b.Pending(); w > w0 {
			return done
		}
		if time.Now().After(deadline) {
			t.Fatal("receiver never registered")
		}
		time.Sleep(time.Millisecond)
	}
}

// recvThenBegin starts a Recv into p (see recvAsync), then begins a
// message of n bytes on the same tag, which the waiting receiver matches.
func recvThenBegin(t *testing.T, b *Box, ctx context.Context, p []byte, n int) (<-chan error, *Msg) {
	t.Helper()
	done := recvAsync(t, b, ctx, p)
	return done, b.Begin(tagA, n)
}

// beginWith begins a message of n bytes on tagA and writes its first
// bytes, p.
func beginWith(t *testing.T, b *Box, n int, p []byte) *Msg {
	t.Helper()
	m := b.Begin(tagA, n)
	write(t, m, p)
	return m
}

// deliver writes the rest of m and ends it, then checks that the
// receive behind done succeeded with want in p.
func deliver(t *testing.T, m *Msg, rest []byte, done <-chan error, p []byte, want string) {
	t.Helper()
	write(t, m, rest)
	m.Done()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if string(p) != want {
		t.Fatalf("got %q", p)
	}
}

// recvClaiming starts a Recv into p and returns its result channel once
// the receiver has taken over m, a message begun before it.
func recvClaiming(t *testing.T, b *Box, ctx context.Context, p []byte, m *Msg) <-chan error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- b.Recv(ctx, tagA, p) }()
	for deadline := time.Now().Add(5 * time.Second); ; {
		m.mu.Lock()
		claimed := m.w != nil
		m.mu.Unlock()
		if claimed {
			return done
		}
		if time.Now().After(deadline) {
			t.Fatal("receiver never claimed the message")
		}
		time.Sleep(time.Millisecond)
	}
}

func TestDirectDelivery(t *testing.T) {
	b := New(1)
	p := make([]byte, 6)
	done, m := recvThenBegin(t, b, context.Background(), p, 6)
	if &m.dst[0] != &p[0] {
		t.Fatal("message matched to a waiting receiver does not target its buffer")
	}
	write(t, m, []byte("abc"))
	deliver(t, m, []byte("def"), done, p, "abcdef")
	if msgs, ws := b.Pending(); msgs != 0 || ws != 0 || len(b.streams) != 0 {
		t.Fatalf("box not empty: %d msgs %d waiters %d streams", msgs, ws, len(b.streams))
	}
}

func TestClaimInProgress(t *testing.T) {
	b := New(1)
	m := beginWith(t, b, 6, []byte("abc"))
	p := make([]byte, 6)
	done := recvClaiming(t, b, context.Background(), p, m)
	deliver(t, m, []byte("def"), done, p, "abcdef")
}

func TestCancelMidMessageKeepsMessage(t *testing.T) {
	b := New(1)
	ctx, cancel := context.WithCancel(context.Background())
	p := make([]byte, 6)
	done, m := recvThenBegin(t, b, ctx, p, 6)
	write(t, m, []byte("abc"))
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Recv: %v", err)
	}
	// The receiver is detached: further writes must not touch p.
	copy(p, "XXXXXX")
	write(t, m, []byte("def"))
	m.Done()
	if string(p) != "XXXXXX" {
		t.Fatalf("detached buffer written: %q", p)
	}
	q := make([]byte, 6)
	if err := b.Recv(context.Background(), tagA, q); err != nil {
		t.Fatal(err)
	}
	if string(q) != "abcdef" {
		t.Fatalf("message after cancellation: got %q", q)
	}
}

func TestOrderPerTag(t *testing.T) {
	b := New(1)
	for i := range 5 {
		m := beginWith(t, b, 1, []byte{byte(i)})
		m.Done()
	}
	for i := range 5 {
		p := make([]byte, 1)
		if err := b.Recv(context.Background(), tagA, p); err != nil {
			t.Fatal(err)
		}
		if p[0] != byte(i) {
			t.Fatalf("message %d: got %d", i, p[0])
		}
	}
}

func TestLengthMismatch(t *testing.T) {
	t.Run("waiting", func(t *testing.T) {
		b := New(1)
		done, m := recvThenBegin(t, b, context.Background(), make([]byte, 3), 4)
		write(t, m, []byte("abcd"))
		m.Done()
		err := <-done
		if !errors.Is(err, transport.ErrLength) || err.Error() != "message is 4 bytes, buffer is 3 bytes" {
			t.Fatalf("got %v", err)
		}
		p := make([]byte, 4)
		if err := b.Recv(context.Background(), tagA, p); err != nil || string(p) != "abcd" {
			t.Fatalf("message not kept: %q, %v", p, err)
		}
	})
	t.Run("queued", func(t *testing.T) {
		b := New(1)
		m := beginWith(t, b, 4, []byte("abcd"))
		m.Done()
		if err := b.Recv(context.Background(), tagA, make([]byte, 5)); !errors.Is(err, transport.ErrLength) {
			t.Fatalf("got %v", err)
		}
	})
}

func TestFailKeepsCompleteMessages(t *testing.T) {
	b := New(1)
	m := beginWith(t, b, 2, []byte("ok"))
	m.Done()
	other := transport.Tag{Group: 9}
	done := make(chan error, 1)
	go func() { done <- b.Recv(context.Background(), other, make([]byte, 1)) }()
	for {
		if _, w := b.Pending(); w == 1 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	peerErr := &transport.PeerError{Peer: 3, Err: errors.New("gone")}
	b.Fail(peerErr)
	if err := <-done; !errors.Is(err, peerErr) {
		t.Fatalf("waiting receiver: %v", err)
	}
	p := make([]byte, 2)
	if err := b.Recv(context.Background(), tagA, p); err != nil || string(p) != "ok" {
		t.Fatalf("complete message lost after Fail: %q %v", p, err)
	}
	if err := b.Recv(context.Background(), tagA, p); !errors.Is(err, peerErr) {
		t.Fatalf("Recv after the queue drained: %v", err)
	}
}

func TestAbort(t *testing.T) {
	t.Run("matched", func(t *testing.T) {
		b := New(1)
		done, m := recvThenBegin(t, b, context.Background(), make([]byte, 4), 4)
		write(t, m, []byte("ab"))
		cause := errors.New("link broke")
		m.Abort(cause)
		if err := <-done; !errors.Is(err, cause) {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("unclaimed", func(t *testing.T) {
		b := New(1)
		m := beginWith(t, b, 4, []byte("ab"))
		m.Abort(errors.New("link broke"))
		if msgs, _ := b.Pending(); msgs != 0 {
			t.Fatalf("aborted message still queued")
		}
	})
}

func TestCloseDetachesMatchedReceiver(t *testing.T) {
	b := New(1)
	p := make([]byte, 4)
	done, m := recvThenBegin(t, b, context.Background(), p, 4)
	write(t, m, []byte("ab"))
	b.Close(transport.ErrClosed)
	if err := <-done; !errors.Is(err, transport.ErrClosed) {
		t.Fatalf("got %v", err)
	}
	copy(p, "ZZZZ")
	write(t, m, []byte("cd")) // discarded
	m.Done()
	if !bytes.Equal(p, []byte("ZZZZ")) {
		t.Fatalf("buffer written after Close: %q", p)
	}
	if err := b.Recv(context.Background(), tagA, p); !errors.Is(err, transport.ErrClosed) {
		t.Fatalf("Recv after Close: %v", err)
	}
	m2 := b.Begin(tagA, 3) // discarded silently
	write(t, m2, []byte("xyz"))
	m2.Done()
}

func TestLyingLengthAllocatesLazily(t *testing.T) {
	b := New(1)
	const claimed = 1 << 40
	m := b.Begin(tagA, claimed)
	if m.dst != nil || len(m.chunks) != 0 {
		t.Fatalf("allocated %d bytes up front for a %d-byte message", len(m.dst)+len(m.chunks)*chunkBytes, claimed)
	}
	write(t, m, []byte("abc"))
	if len(m.chunks) != 1 {
		t.Fatalf("%d chunks after 3 bytes", len(m.chunks))
	}
	m.Abort(errors.New("link broke"))
}

func TestGrowingBuffer(t *testing.T) {
	b := New(1)
	const n = 3*chunkBytes + 5
	m := b.Begin(tagA, n)
	src := make([]byte, n)
	for i := range src {
		src[i] = byte(i % 251)
	}
	for off := 0; off < n; {
		k, _ := m.Write(func(dst []byte) (int, error) { return copy(dst, src[off:]), nil })
		off += k
	}
	m.Done()
	p := make([]byte, n)
	if err := b.Recv(context.Background(), tagA, p); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(p, src) {
		t.Fatal("grown message corrupted")
	}
}

// TestChunkedPaths drives a long message through every hand-over: queued
// then claimed mid-way, detached by cancellation, claimed again, finished.
func TestChunkedPaths(t *testing.T) {
	b := New(1)
	const n = 2*chunkBytes + 1000
	src := make([]byte, n)
	for i := range src {
		src[i] = byte(i*7 + i>>11)
	}
	m := b.Begin(tagA, n)
	feed := func(upto int) {
		for m.off < upto {
			_, _ = m.Write(func(dst []byte) (int, error) { return copy(dst, src[m.off:upto]), nil })
		}
	}
	feed(chunkBytes + 10) // unclaimed: stored in two chunks
	ctx, cancel := context.WithCancel(context.Background())
	p1 := make([]byte, n)
	done := recvClaiming(t, b, ctx, p1, m)
	feed(chunkBytes + 5000) // straight into p1
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	feed(2*chunkBytes + 7) // back into private chunks
	p2 := make([]byte, n)
	done = recvClaiming(t, b, context.Background(), p2, m)
	feed(n)
	m.Done()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(p2, src) {
		t.Fatal("message corrupted across hand-overs")
	}
}

// TestLengthErrorPrefix: a receiver that does not fit the message it meets
// fails with a *transport.LengthError only once the message's head has
// arrived, and the error carries that head.
func TestLengthErrorPrefix(t *testing.T) {
	long := make([]byte, 100)
	for i := range long {
		long[i] = byte(i + 1)
	}
	head := long[:transport.LengthPrefixBytes]
	notDone := func(t *testing.T, done <-chan error, when string) {
		t.Helper()
		select {
		case err := <-done:
			t.Fatalf("%s: receive finished early: %v", when, err)
		default:
		}
	}
	checkErr := func(t *testing.T, err error, got, want int, prefix []byte) {
		t.Helper()
		var le *transport.LengthError
		if !errors.As(err, &le) || !errors.Is(err, transport.ErrLength) {
			t.Fatalf("error %v is not a *transport.LengthError wrapping ErrLength", err)
		}
		if le.Peer != 1 || le.Tag != tagA || le.Got != got || le.Want != want || !bytes.Equal(le.Prefix, prefix) {
			t.Fatalf("got %+v, want peer 1 tag %v got %d want %d prefix % x", *le, tagA, got, want, prefix)
		}
	}
	// keeps checks that the message is still there for a receive that fits.
	keeps := func(t *testing.T, b *Box, m *Msg, rest []byte) {
		t.Helper()
		write(t, m, rest)
		m.Done()
		p := make([]byte, len(long))
		if err := b.Recv(context.Background(), tagA, p); err != nil || !bytes.Equal(p, long) {
			t.Fatalf("message not kept: %v", err)
		}
	}
	// headCompletes checks that the receive still waits with from bytes
	// of long written, then writes up to to, which completes the length
	// prefix: the receive fails and the message stays.
	headCompletes := func(t *testing.T, b *Box, m *Msg, done <-chan error, from, to int) {
		t.Helper()
		notDone(t, done, fmt.Sprintf("after %d bytes", from))
		write(t, m, long[from:to])
		checkErr(t, <-done, 100, 3, head)
		keeps(t, b, m, long[to:])
	}

	t.Run("waiting", func(t *testing.T) {
		b := New(1)
		done, m := recvThenBegin(t, b, context.Background(), make([]byte, 3), len(long))
		notDone(t, done, "after Begin")
		write(t, m, long[:10])
		headCompletes(t, b, m, done, 10, 70)
	})
	t.Run("queued-partial", func(t *testing.T) {
		b := New(1)
		m := beginWith(t, b, len(long), long[:10])
		done := recvAsync(t, b, context.Background(), make([]byte, 3))
		write(t, m, long[10:63])
		headCompletes(t, b, m, done, 63, 64)
	})
	t.Run("queued-head-in", func(t *testing.T) {
		b := New(1)
		m := beginWith(t, b, len(long), long[:80])
		checkErr(t, b.Recv(context.Background(), tagA, make([]byte, 3)), 100, 3, head)
		keeps(t, b, m, long[80:])
	})
	t.Run("short-message", func(t *testing.T) {
		b := New(1)
		done, m := recvThenBegin(t, b, context.Background(), make([]byte, 3), 5)
		write(t, m, []byte("abc"))
		notDone(t, done, "after 3 of 5 bytes")
		write(t, m, []byte("de"))
		checkErr(t, <-done, 5, 3, []byte("abcde"))
		m.Done()
	})
	t.Run("empty-message", func(t *testing.T) {
		b := New(1)
		done, m := recvThenBegin(t, b, context.Background(), make([]byte, 3), 0)
		checkErr(t, <-done, 0, 3, []byte{})
		m.Done()
	})
	t.Run("cancelled", func(t *testing.T) {
		b := New(1)
		ctx, cancel := context.WithCancel(context.Background())
		m := beginWith(t, b, len(long), long[:10])
		done := recvAsync(t, b, ctx, make([]byte, 3))
		cancel()
		checkErr(t, <-done, 100, 3, long[:10])
		if _, w := b.Pending(); w != 0 {
			t.Fatalf("%d receivers still waiting after cancel", w)
		}
		keeps(t, b, m, long[10:])
	})
	t.Run("aborted", func(t *testing.T) {
		b := New(1)
		done, m := recvThenBegin(t, b, context.Background(), make([]byte, 3), len(long))
		write(t, m, long[:10])
		m.Abort(errors.New("peer gone"))
		checkErr(t, <-done, 100, 3, long[:10])
	})
	t.Run("closed", func(t *testing.T) {
		b := New(1)
		done, m := recvThenBegin(t, b, context.Background(), make([]byte, 3), len(long))
		write(t, m, long[:10])
		b.Close(transport.ErrClosed)
		if err := <-done; !errors.Is(err, transport.ErrClosed) {
			t.Fatalf("got %v, want ErrClosed", err)
		}
	})
}

// TestQuiet: a box is quiet under a tag while it holds nothing for it (no
// message, no receiver) and has neither failed nor closed.
func TestQuiet(t *testing.T) {
	tagB := transport.Tag{Group: 1, Seq: 2}
	b := New(1)
	if !b.Quiet(tagA) {
		t.Fatal("empty box not quiet")
	}
	m := b.Begin(tagA, 2)
	if b.Quiet(tagA) || !b.Quiet(tagB) {
		t.Fatal("a message under tagA: want tagA busy, tagB quiet")
	}
	write(t, m, []byte("hi"))
	m.Done()
	if err := b.Recv(context.Background(), tagA, make([]byte, 2)); err != nil {
		t.Fatal(err)
	}
	if !b.Quiet(tagA) {
		t.Fatal("not quiet after the message was received")
	}
	q, err := b.Post(tagB, make([]byte, 1))
	if err != nil || q == nil {
		t.Fatalf("Post: %v, %v", q, err)
	}
	if b.Quiet(tagB) {
		t.Fatal("a receiver waits under tagB: want busy")
	}
	b.Fail(errors.New("gone"))
	if b.Quiet(tagA) {
		t.Fatal("a failed box is quiet")
	}
	if err := q.Wait(context.Background()); err == nil {
		t.Fatal("receiver not failed")
	}
}
