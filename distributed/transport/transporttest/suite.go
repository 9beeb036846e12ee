package transporttest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cohortml/cohort/distributed/transport"
)

// World is a connected set of transports, element r being rank r.
type World struct {
	Transports []transport.Transport
	// Kill ends rank r abruptly, as a crash would: no goodbye to its
	// peers, and its own pending calls may fail with any error.
	Kill func(r int)
}

// Factory builds a world of worldSize ranks for the test tb.
type Factory func(tb testing.TB, worldSize int) World

// Config tunes the suite to a transport's cost.
type Config struct {
	// Worlds lists the world sizes of the multi-rank tests; nil means
	// {1, 2, 3, 4, 7, 8}.
	Worlds []int
	// LargeBytes is the size of the large-message tests; 0 means
	// 16 MiB + 3.
	LargeBytes int
	// DeathTimeout bounds how long a peer's death may take to be reported;
	// 0 means 5 s.
	DeathTimeout time.Duration
}

func (c Config) worlds() []int {
	if c.Worlds == nil {
		return []int{1, 2, 3, 4, 7, 8}
	}
	return c.Worlds
}

func (c Config) large() int {
	if c.LargeBytes == 0 {
		return 16<<20 + 3
	}
	return c.LargeBytes
}

func (c Config) deathTimeout() time.Duration {
	if c.DeathTimeout == 0 {
		return 5 * time.Second
	}
	return c.DeathTimeout
}

// testTimeout bounds every blocking call of the suite so a broken
// transport fails the test instead of hanging it.
const testTimeout = 60 * time.Second

// Run runs the conformance suite as subtests of t.
func Run(t *testing.T, newWorld Factory, cfg Config) {
	s := &suite{newWorld: newWorld, cfg: cfg}
	for _, c := range []struct {
		name string
		run  func(*testing.T)
	}{
		{"exchange", s.exchange}, {"order", s.order}, {"independent-tags", s.independentTags},
		{"concurrent-senders", s.concurrentSenders}, {"zero-length", s.zeroLength}, {"large", s.large},
		{"length-mismatch", s.lengthMismatch}, {"invalid-rank", s.invalidRank}, {"close", s.close},
		{"cancel", s.cancel}, {"peer-close", s.peerClose}, {"peer-death", s.peerDeath},
	} {
		t.Run(c.name, c.run)
	}
}

type suite struct {
	newWorld Factory
	cfg      Config
}

// world builds a world and closes it when the test ends, then checks
// that no goroutine outlives it.
func (s *suite) world(t *testing.T, n int) World {
	t.Helper()
	before := runtime.NumGoroutine()
	w := s.newWorld(t, n)
	if len(w.Transports) != n {
		t.Fatalf("factory built %d transports, want %d", len(w.Transports), n)
	}
	for r, tr := range w.Transports {
		if tr.Rank() != r || tr.Size() != n {
			t.Fatalf("transport %d reports rank %d size %d, want rank %d size %d", r, tr.Rank(), tr.Size(), r, n)
		}
	}
	t.Cleanup(func() {
		closeAll(t, w)
		CheckGoroutines(t, before)
	})
	return w
}

func closeAll(t testing.TB, w World) {
	var wg sync.WaitGroup
	for r, tr := range w.Transports {
		wg.Go(func() {
			if err := tr.Close(); err != nil && !errors.Is(err, transport.ErrClosed) {
				t.Errorf("rank %d: Close: %v", r, err)
			}
		})
	}
	wg.Wait()
}

// CheckGoroutines fails t if, within a few seconds, the number of
// goroutines does not drop back to at most before.
func CheckGoroutines(t testing.TB, before int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		n := runtime.NumGoroutine()
		if n <= before {
			return
		}
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			buf = buf[:runtime.Stack(buf, true)]
			t.Errorf("%d goroutines still running, %d before the test:\n%s", n, before, buf)
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// eachRank runs fn for every rank concurrently and reports their errors.
func eachRank(t testing.TB, n int, fn func(r int) error) {
	t.Helper()
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Go(func() { errs[r] = fn(r) })
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}

// Fill writes a pattern determined by seed into p.
func Fill(p []byte, seed uint64) {
	x := seed*0x9E3779B97F4A7C15 + 1
	i := 0
	for ; i+8 <= len(p); i += 8 {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		p[i], p[i+1], p[i+2], p[i+3] = byte(x), byte(x>>8), byte(x>>16), byte(x>>24)
		p[i+4], p[i+5], p[i+6], p[i+7] = byte(x>>32), byte(x>>40), byte(x>>48), byte(x>>56)
	}
	for ; i < len(p); i++ {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		p[i] = byte(x)
	}
}

// Pattern returns n bytes of Fill's pattern for seed.
func Pattern(n int, seed uint64) []byte {
	p := make([]byte, n)
	Fill(p, seed)
	return p
}

// checkPayload compares got with Pattern(len(got), seed).
func checkPayload(got []byte, seed uint64) error {
	want := Pattern(len(got), seed)
	if bytes.Equal(got, want) {
		return nil
	}
	for i := range got {
		if got[i] != want[i] {
			return fmt.Errorf("payload of %d bytes differs at byte %d: got %#x, want %#x", len(got), i, got[i], want[i])
		}
	}
	return nil
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

func seedOf(from, to, k int) uint64 { return uint64(from)<<40 | uint64(to)<<20 | uint64(k) }

// exchangeAll sends tr's rank a message of each size in sizes to every
// rank, itself included, under its own tag, before receiving any; then
// receives every rank's in reverse tag order (to exercise queueing) and
// checks them.
func exchangeAll(ctx context.Context, tr transport.Transport, sizes []int) error {
	r, n := tr.Rank(), tr.Size()
	for to := range n {
		for k, size := range sizes {
			tag := transport.Tag{Group: 1, Seq: uint64(k), Step: uint32(to)}
			if err := tr.Send(ctx, to, tag, Pattern(size, seedOf(r, to, k))); err != nil {
				return err
			}
		}
	}
	for from := range n {
		for k := len(sizes) - 1; k >= 0; k-- {
			p := make([]byte, sizes[k])
			tag := transport.Tag{Group: 1, Seq: uint64(k), Step: uint32(r)}
			if err := tr.Recv(ctx, from, tag, p); err != nil {
				return err
			}
			if err := checkPayload(p, seedOf(from, r, k)); err != nil {
				return fmt.Errorf("from rank %d message %d: %v", from, k, err)
			}
		}
	}
	return nil
}

// exchange: every rank sends several messages of different sizes to every
// rank, itself included, before receiving any, then checks them all.
func (s *suite) exchange(t *testing.T) {
	sizes := []int{0, 1, 1000, 70_000, 1<<20 + 5}
	for _, n := range s.cfg.worlds() {
		t.Run(fmt.Sprintf("world=%d", n), func(t *testing.T) {
			w := s.world(t, n)
			ctx := ctxT(t)
			eachRank(t, n, func(r int) error {
				return exchangeAll(ctx, w.Transports[r], sizes)
			})
		})
	}
}

// order: many messages under one tag arrive in the order sent, whatever
// their sizes and whether the receiver is early or late.
func (s *suite) order(t *testing.T) {
	const count = 200
	size := func(k int) int { return []int{0, 7, 4096, 300_000, 1<<20 + 1}[k%5] }
	w := s.world(t, 2)
	ctx := ctxT(t)
	tag := transport.Tag{Group: 2, Seq: 9, Step: 1}
	eachRank(t, 2, func(r int) error {
		tr := w.Transports[r]
		if r == 0 {
			for k := range count {
				if err := tr.Send(ctx, 1, tag, Pattern(size(k), uint64(k))); err != nil {
					return err
				}
			}
			return nil
		}
		for k := range count {
			p := make([]byte, size(k))
			if err := tr.Recv(ctx, 0, tag, p); err != nil {
				return fmt.Errorf("message %d: %w", k, err)
			}
			if err := checkPayload(p, uint64(k)); err != nil {
				return fmt.Errorf("message %d: %v", k, err)
			}
		}
		return nil
	})
}

// independentTags: a receiver waiting on one tag is not blocked by
// messages queued under another, and a queued message does not block a
// receive on a later one.
func (s *suite) independentTags(t *testing.T) {
	w := s.world(t, 2)
	ctx := ctxT(t)
	a := transport.Tag{Group: 3, Seq: 1}
	b := transport.Tag{Group: 3, Seq: 2}
	c := transport.Tag{Group: 4, Seq: 1}
	t0, t1 := w.Transports[0], w.Transports[1]

	// Sent a then b; received b then a.
	must(t, t0.Send(ctx, 1, a, Pattern(100, 1)))
	must(t, t0.Send(ctx, 1, b, Pattern(200, 2)))
	pb := make([]byte, 200)
	must(t, t1.Recv(ctx, 0, b, pb))
	must(t, checkPayload(pb, 2))
	pa := make([]byte, 100)
	must(t, t1.Recv(ctx, 0, a, pa))
	must(t, checkPayload(pa, 1))

	// A receiver blocked on c does not stop b from being received.
	done := make(chan error, 1)
	pc := make([]byte, 50)
	go func() { done <- t1.Recv(ctx, 0, c, pc) }()
	must(t, t0.Send(ctx, 1, b, Pattern(300, 3)))
	pb = make([]byte, 300)
	must(t, t1.Recv(ctx, 0, b, pb))
	must(t, checkPayload(pb, 3))
	select {
	case err := <-done:
		t.Fatalf("recv on tag c returned before anything was sent under it: %v", err)
	default:
	}
	must(t, t0.Send(ctx, 1, c, Pattern(50, 4)))
	must(t, <-done)
	must(t, checkPayload(pc, 4))
}

// concurrentSenders: several goroutines per rank send to every other rank
// at once, each under its own tag; every stream arrives intact and in
// order.
func (s *suite) concurrentSenders(t *testing.T) {
	const senders, count = 6, 30
	size := func(k int) int { return []int{16, 4096, 100_000}[k%3] }
	for _, n := range []int{2, 4} {
		t.Run(fmt.Sprintf("world=%d", n), func(t *testing.T) {
			w := s.world(t, n)
			ctx := ctxT(t)
			eachRank(t, n, func(r int) error {
				tr := w.Transports[r]
				var wg sync.WaitGroup
				errs := make(chan error, 2*senders*n)
				for g := range senders {
					wg.Go(func() {
						for k := range count {
							for to := range n {
								if to == r {
									continue
								}
								tag := transport.Tag{Group: 5, Seq: uint64(g), Step: uint32(to)}
								if err := tr.Send(ctx, to, tag, Pattern(size(k), seedOf(r, g, k))); err != nil {
									errs <- err
									return
								}
							}
						}
					})
				}
				for from := range n {
					if from == r {
						continue
					}
					for g := range senders {
						wg.Go(func() {
							tag := transport.Tag{Group: 5, Seq: uint64(g), Step: uint32(r)}
							for k := range count {
								p := make([]byte, size(k))
								if err := tr.Recv(ctx, from, tag, p); err != nil {
									errs <- err
									return
								}
								if err := checkPayload(p, seedOf(from, g, k)); err != nil {
									errs <- fmt.Errorf("from rank %d stream %d message %d: %v", from, g, k, err)
									return
								}
							}
						})
					}
				}
				wg.Wait()
				close(errs)
				return <-errs
			})
		})
	}
}

// zeroLength: empty messages are delivered, in order with others.
func (s *suite) zeroLength(t *testing.T) {
	w := s.world(t, 2)
	ctx := ctxT(t)
	tag := transport.Tag{Group: 6}
	t0, t1 := w.Transports[0], w.Transports[1]
	must(t, t0.Send(ctx, 1, tag, nil))
	must(t, t0.Send(ctx, 1, tag, Pattern(5, 5)))
	must(t, t0.Send(ctx, 1, tag, []byte{}))
	must(t, t1.Recv(ctx, 0, tag, nil))
	p := make([]byte, 5)
	must(t, t1.Recv(ctx, 0, tag, p))
	must(t, checkPayload(p, 5))
	must(t, t1.Recv(ctx, 0, tag, []byte{}))
	// A receiver that waits before the empty message is sent.
	done := make(chan error, 1)
	go func() { done <- t1.Recv(ctx, 0, tag, nil) }()
	must(t, t0.Send(ctx, 1, tag, nil))
	must(t, <-done)
}

// large: a large message, received by a receiver already waiting, by one
// arriving later, and exchanged both ways at once with both sends issued
// before either receive.
func (s *suite) large(t *testing.T) {
	size := s.cfg.large()
	payload := Pattern(size, 77)
	// pair gives each case a world of two, a context and its own tag.
	pair := func(t *testing.T, seq uint64) (World, context.Context, transport.Tag) {
		return s.world(t, 2), ctxT(t), transport.Tag{Group: 7, Seq: seq}
	}
	check := func(t *testing.T, p []byte) {
		if !bytes.Equal(p, payload) {
			t.Fatal(checkPayload(p, 77))
		}
	}
	t.Run("recv-first", func(t *testing.T) {
		w, ctx, tag := pair(t, 1)
		done := make(chan error, 1)
		p := make([]byte, size)
		go func() { done <- w.Transports[1].Recv(ctx, 0, tag, p) }()
		must(t, w.Transports[0].Send(ctx, 1, tag, payload))
		must(t, <-done)
		check(t, p)
	})
	t.Run("send-first", func(t *testing.T) {
		w, ctx, tag := pair(t, 2)
		must(t, w.Transports[0].Send(ctx, 1, tag, payload))
		p := make([]byte, size)
		must(t, w.Transports[1].Recv(ctx, 0, tag, p))
		check(t, p)
	})
	t.Run("both-ways", func(t *testing.T) {
		w, ctx, tag := pair(t, 3)
		eachRank(t, 2, func(r int) error {
			tr := w.Transports[r]
			for k := range 2 {
				if err := tr.Send(ctx, 1-r, tag, payload); err != nil {
					return fmt.Errorf("send %d: %w", k, err)
				}
			}
			p := make([]byte, size)
			for k := range 2 {
				clear(p)
				if err := tr.Recv(ctx, 1-r, tag, p); err != nil {
					return fmt.Errorf("recv %d: %w", k, err)
				}
				if !bytes.Equal(p, payload) {
					return fmt.Errorf("recv %d: %v", k, checkPayload(p, 77))
				}
			}
			return nil
		})
	})
}

// lengthMismatch: a receive whose buffer does not fit fails, naming both
// lengths, with a *transport.LengthError carrying the message's first
// bytes, and leaves the message for a receive that fits. Each case runs
// with the message queued before the receive and with the receive waiting
// first; the long message spans many frames or ring records.
func (s *suite) lengthMismatch(t *testing.T) {
	w := s.world(t, 2)
	ctx := ctxT(t)
	t0, t1 := w.Transports[0], w.Transports[1]
	cases := []struct {
		name      string
		got, want int
	}{
		{"10-into-9", 10, 9},
		{"40-into-440", 40, 440},
		{"440-into-40", 440, 40},
		{"1MiB-into-40", 1<<20 + 3, 40},
		{"empty-into-8", 0, 8},
	}
	seq := uint64(0)
	for _, c := range cases {
		for _, order := range []string{"queued", "waiting"} {
			t.Run(c.name+"/"+order, func(t *testing.T) {
				seq++
				tag := transport.Tag{Group: 8, Seq: seq, Step: 3}
				payload := Pattern(c.got, seq)
				var err error
				if order == "queued" {
					must(t, t0.Send(ctx, 1, tag, payload))
					err = t1.Recv(ctx, 0, tag, make([]byte, c.want))
				} else {
					done := make(chan error, 1)
					go func() { done <- t1.Recv(ctx, 0, tag, make([]byte, c.want)) }()
					// Give the receiver a chance to wait first; either
					// order must give the same result.
					time.Sleep(10 * time.Millisecond)
					must(t, t0.Send(ctx, 1, tag, payload))
					err = <-done
				}
				if err == nil {
					t.Fatalf("recv with a %d-byte buffer of a %d-byte message succeeded", c.want, c.got)
				}
				if !errors.Is(err, transport.ErrLength) {
					t.Errorf("error %q does not wrap transport.ErrLength", err)
				}
				if msg := err.Error(); !strings.Contains(msg, fmt.Sprint(c.got)) || !strings.Contains(msg, fmt.Sprint(c.want)) {
					t.Errorf("error %q does not name both lengths (%d and %d)", msg, c.got, c.want)
				}
				var le *transport.LengthError
				if !errors.As(err, &le) {
					t.Fatalf("error %q does not wrap a *transport.LengthError", err)
				}
				prefix := payload[:min(c.got, transport.LengthPrefixBytes)]
				if le.Peer != 0 || le.Tag != tag || le.Got != c.got || le.Want != c.want || !bytes.Equal(le.Prefix, prefix) {
					t.Errorf("LengthError{Peer %d, Tag %v, Got %d, Want %d, Prefix % x}, want {0, %v, %d, %d, % x}",
						le.Peer, le.Tag, le.Got, le.Want, le.Prefix, tag, c.got, c.want, prefix)
				}
				p := make([]byte, c.got)
				must(t, t1.Recv(ctx, 0, tag, p))
				must(t, checkPayload(p, seq))
			})
		}
	}
}

// invalidRank: out-of-range ranks are errors, not panics.
func (s *suite) invalidRank(t *testing.T) {
	w := s.world(t, 2)
	ctx := ctxT(t)
	tr := w.Transports[0]
	for _, r := range []int{-1, 2, 1 << 30} {
		if err := tr.Send(ctx, r, transport.Tag{}, []byte{1}); err == nil {
			t.Errorf("Send to rank %d succeeded", r)
		} else if !strings.Contains(err.Error(), fmt.Sprint(r)) {
			t.Errorf("Send to rank %d: error %q does not name the rank", r, err)
		}
		if err := tr.Recv(ctx, r, transport.Tag{}, []byte{1}); err == nil {
			t.Errorf("Recv from rank %d succeeded", r)
		}
	}
}

// close: Close unblocks pending receives with ErrClosed, later calls fail
// with ErrClosed, and Close is idempotent.
func (s *suite) close(t *testing.T) {
	w := s.world(t, 3)
	ctx := ctxT(t)
	tr := w.Transports[1]
	tag := transport.Tag{Group: 10}
	const pending = 3
	done := make(chan error, pending)
	for k := range pending {
		go func() { done <- tr.Recv(ctx, k%3, tag, make([]byte, 8)) }()
	}
	time.Sleep(20 * time.Millisecond)
	start := time.Now()
	must(t, tr.Close())
	for range pending {
		if err := within(t, done, 5*time.Second, "pending Recv still blocked 5 s after Close"); !errors.Is(err, transport.ErrClosed) {
			t.Errorf("pending Recv returned %v, want ErrClosed", err)
		}
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Close took %v to unblock pending receives", d)
	}
	if err := tr.Send(ctx, 0, tag, []byte{1}); !errors.Is(err, transport.ErrClosed) {
		t.Errorf("Send after Close: %v, want ErrClosed", err)
	}
	if err := tr.Recv(ctx, 0, tag, []byte{1}); !errors.Is(err, transport.ErrClosed) {
		t.Errorf("Recv after Close: %v, want ErrClosed", err)
	}
	if err := tr.Close(); err != nil && !errors.Is(err, transport.ErrClosed) {
		t.Errorf("second Close: %v", err)
	}
}

// cancel: a receive returns promptly when its context ends and consumes
// no message.
func (s *suite) cancel(t *testing.T) {
	w := s.world(t, 2)
	ctx := ctxT(t)
	t0, t1 := w.Transports[0], w.Transports[1]
	tag := transport.Tag{Group: 11, Seq: 1}

	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- t1.Recv(cctx, 0, tag, make([]byte, 4)) }()
	time.Sleep(10 * time.Millisecond)
	start := time.Now()
	cancel()
	if err := within(t, done, 5*time.Second, "cancelled Recv still blocked after 5 s"); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled Recv returned %v, want context.Canceled", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("cancelled Recv took %v to return", d)
	}

	dctx, dcancel := context.WithTimeout(ctx, 30*time.Millisecond)
	defer dcancel()
	if err := t1.Recv(dctx, 0, tag, make([]byte, 4)); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Recv past its deadline returned %v, want context.DeadlineExceeded", err)
	}

	// The message sent now goes to the next receive, not to a cancelled one.
	must(t, t0.Send(ctx, 1, tag, Pattern(4, 11)))
	p := make([]byte, 4)
	must(t, t1.Recv(ctx, 0, tag, p))
	must(t, checkPayload(p, 11))
}

// peerClose: messages a peer sent before closing are still received; after
// them, receives from it fail with a *PeerError naming it.
func (s *suite) peerClose(t *testing.T) {
	w := s.world(t, 2)
	ctx := ctxT(t)
	t0, t1 := w.Transports[0], w.Transports[1]
	tag := transport.Tag{Group: 12}
	must(t, t1.Send(ctx, 0, tag, Pattern(3000, 12)))
	must(t, t1.Close())
	p := make([]byte, 3000)
	must(t, t0.Recv(ctx, 1, tag, p))
	must(t, checkPayload(p, 12))
	err := recvWithin(t, t0, 1, tag, 5*time.Second)
	checkPeerError(t, err, 1)
}

// peerDeath: when a rank dies, every peer's pending receive from it fails
// with a *PeerError naming it within the deadline; sends to it fail soon
// after; links between the survivors keep working.
func (s *suite) peerDeath(t *testing.T) {
	for _, n := range []int{2, 3, 4} {
		t.Run(fmt.Sprintf("world=%d", n), func(t *testing.T) {
			w := s.world(t, n)
			if w.Kill == nil {
				t.Skip("factory cannot kill a rank")
			}
			ctx := ctxT(t)
			dead := n - 1
			tag := transport.Tag{Group: 13}
			done := make(chan error, n)
			for r := range dead {
				go func() { done <- w.Transports[r].Recv(ctx, dead, tag, make([]byte, 64)) }()
			}
			time.Sleep(20 * time.Millisecond)
			start := time.Now()
			w.Kill(dead)
			for range dead {
				err := within(t, done, s.cfg.deathTimeout(), fmt.Sprintf("receive from killed rank %d still blocked after %v", dead, s.cfg.deathTimeout()))
				checkPeerError(t, err, dead)
			}
			t.Logf("death of rank %d reported after %v", dead, time.Since(start))
			for r := range dead {
				err := w.Transports[r].Send(ctx, dead, tag, make([]byte, 64))
				checkPeerError(t, err, dead)
			}
			if n >= 3 {
				must(t, w.Transports[0].Send(ctx, 1, tag, Pattern(10, 13)))
				p := make([]byte, 10)
				must(t, w.Transports[1].Recv(ctx, 0, tag, p))
				must(t, checkPayload(p, 13))
			}
		})
	}
}

// within returns the error a call running in the background delivers on
// done, and fails t with blocked if none comes within d.
func within(t *testing.T, done <-chan error, d time.Duration, blocked string) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(d):
		t.Fatal(blocked)
		return nil
	}
}

func recvWithin(t *testing.T, tr transport.Transport, from int, tag transport.Tag, d time.Duration) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	err := tr.Recv(ctx, from, tag, make([]byte, 1))
	if errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Recv from rank %d still blocked after %v", from, d)
	}
	return err
}

func checkPeerError(t *testing.T, err error, peer int) {
	t.Helper()
	var pe *transport.PeerError
	if !errors.As(err, &pe) {
		t.Errorf("error %v is not a *transport.PeerError", err)
		return
	}
	if pe.Peer != peer {
		t.Errorf("PeerError names rank %d, want %d (%v)", pe.Peer, peer, err)
	}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
