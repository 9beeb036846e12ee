package shm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/cohortml/cohort/distributed/transport"
	"github.com/cohortml/cohort/distributed/transport/transporttest"
	"github.com/cohortml/cohort/distributed/wire"
)

// pair connects two ranks in this process with the given spin.
func pair(t *testing.T, spin time.Duration) []*Transport {
	t.Helper()
	ts, errs := connectWorld(t, 2, func(int) Options {
		return Options{Prefix: testPrefix, RingBytes: minRing, Spin: spin}
	})
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	t.Cleanup(func() {
		for _, tr := range ts {
			tr.Close()
		}
	})
	return ts
}

// TestDirectRecvAllocatesNothing: a message that is in the ring when its
// receiver comes, or arrives while it waits, goes straight from the ring
// into the receiver's buffer: no allocation, whether the receiver spins or
// sleeps on the ring.
func TestDirectRecvAllocatesNothing(t *testing.T) {
	for _, spin := range []time.Duration{50 * time.Microsecond, -1} {
		t.Run(fmt.Sprintf("spin=%v", spin), func(t *testing.T) {
			ts := pair(t, spin)
			ctx := context.Background()
			msg, got := transporttest.Pattern(4<<10, 7), make([]byte, 4<<10)
			seq := uint64(0)
			allocs := testing.AllocsPerRun(200, func() {
				seq++
				tag := transport.Tag{Seq: seq}
				if err := ts[1].Send(ctx, 0, tag, msg); err != nil {
					t.Fatal(err)
				}
				if err := ts[0].Recv(ctx, 1, tag, got); err != nil {
					t.Fatal(err)
				}
			})
			if !bytes.Equal(got, msg) {
				t.Fatal("payload differs")
			}
			if allocs != 0 {
				t.Errorf("%v allocations per message, want 0", allocs)
			}
		})
	}
}

// TestDirectRecvCancelledMidMessage: a receiver whose ctx ends while its
// message is half published consumes nothing: the part it copied is
// queued, and the next receive for the tag gets the whole message.
func TestDirectRecvCancelledMidMessage(t *testing.T) {
	for _, spin := range []time.Duration{50 * time.Microsecond, -1} {
		t.Run(fmt.Sprintf("spin=%v", spin), func(t *testing.T) {
			ts := pair(t, spin)
			tag := transport.Tag{Group: 3, Seq: 9, Step: 1}
			msg := transporttest.Pattern(1000, 3)
			// Rank 1 publishes the header and the first 400 bytes only.
			rest := publishPart(ts[1].peers[0], tag, msg, 400)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
			defer cancel()
			err := ts[0].Recv(ctx, 1, tag, make([]byte, len(msg)))
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("first receive: %v, want a deadline error", err)
			}
			// The rest, padding included, then a second message.
			rest()
			if err := ts[1].Send(context.Background(), 0, tag, []byte("next")); err != nil {
				t.Fatal(err)
			}
			got := make([]byte, len(msg))
			if err := ts[0].Recv(context.Background(), 1, tag, got); err != nil {
				t.Fatalf("second receive: %v", err)
			}
			if !bytes.Equal(got, msg) {
				t.Error("second receive: payload differs")
			}
			next := make([]byte, 4)
			if err := ts[0].Recv(context.Background(), 1, tag, next); err != nil || string(next) != "next" {
				t.Errorf("third receive: %q, %v", next, err)
			}
		})
	}
}

// publishPart has p publish, as the next record of its ring, the header
// of msg under tag and its first n bytes, holding p's send lock; the
// function it returns publishes the rest (and the padding) and lets go.
func publishPart(p *peer, tag transport.Tag, msg []byte, n int) (rest func()) {
	p.mu.Lock()
	h := wire.Header{Kind: wire.KindData, Group: tag.Group, Step: tag.Step, Seq: tag.Seq, Aux: uint64(len(msg))}
	h.Put(p.out.data[p.outHead&p.out.mask:])
	copy(p.out.data[p.outHead+recordAlign:], msg[:n])
	p.publish(p.outHead+recordAlign+uint64(n), tag)
	return func() {
		copy(p.out.data[p.outHead+recordAlign+uint64(n):], msg[n:])
		l := uint64(len(msg))
		p.outHead += recordAlign + l + (recordAlign-l%recordAlign)%recordAlign
		p.publish(p.outHead, tag)
		p.mu.Unlock()
	}
}

// TestDirectRecvLeavesOtherTags: a receiver that finds other tags' records
// ahead of its own hands them to the box, where their receivers find them
// later, in order.
func TestDirectRecvLeavesOtherTags(t *testing.T) {
	ts := pair(t, 50*time.Microsecond)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	a, b := transport.Tag{Seq: 1}, transport.Tag{Seq: 2}
	for i, m := range []struct {
		tag transport.Tag
		s   string
	}{{a, "a1"}, {a, "a2"}, {b, "b1"}} {
		if err := ts[1].Send(ctx, 0, m.tag, []byte(m.s)); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
	}
	for _, want := range []struct {
		tag transport.Tag
		s   string
	}{{b, "b1"}, {a, "a1"}, {a, "a2"}} {
		got := make([]byte, 2)
		if err := ts[0].Recv(ctx, 1, want.tag, got); err != nil || string(got) != want.s {
			t.Fatalf("recv %v: %q, %v; want %q", want.tag, got, err, want.s)
		}
	}
}

// waitSleeping returns once a receiver sleeps on p's incoming ring,
// waiting for its message (a fixed pause is not enough on a loaded host).
func waitSleeping(ctx context.Context, t *testing.T, p *peer) {
	t.Helper()
	for atomic.LoadUint32(p.in.sleepers) == 0 {
		if ctx.Err() != nil {
			t.Fatal("the receiver never waited on the ring")
		}
		time.Sleep(50 * time.Microsecond)
	}
}

// TestSingleCopy: a long message whose receiver waits for it goes
// straight from the sender's memory into the receiver's buffer (the ring
// carries only its header and descriptor); one nobody waits for goes
// through the ring after claimWait; one the receiver cannot read is sent
// inline, and the link stops offering; SendEager never offers.
func TestSingleCopy(t *testing.T) {
	const n = 4 << 20
	t.Run("receiver-waits", func(t *testing.T) {
		ts := pair(t, 50*time.Microsecond)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		// A receiver woken later than claimWait (a loaded host) rightly
		// gets the message through the ring instead; single copy must
		// happen in one of a few tries.
		const tries = 5
		for try := range tries {
			tag := transport.Tag{Seq: uint64(1 + try)}
			msg, got := transporttest.Pattern(n, uint64(11+try)), make([]byte, n)
			done := make(chan error, 1)
			go func() { done <- ts[0].Recv(ctx, 1, tag, got) }()
			// Send once the receiver sleeps on the ring.
			waitSleeping(ctx, t, ts[0].peers[1])
			before := ts[1].peers[0].outHead
			if err := ts[1].Send(ctx, 0, tag, msg); err != nil {
				t.Fatal(err)
			}
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, msg) {
				t.Fatalf("try %d: payload differs", try)
			}
			carried := ts[1].peers[0].outHead - before
			if carried == recordAlign+descBytes {
				return
			}
			t.Logf("try %d: the ring carried %d bytes, not just the header and descriptor (%d): the receiver came too late", try, carried, recordAlign+descBytes)
		}
		t.Errorf("no single copy in %d tries", tries)
	})
	t.Run("eager", func(t *testing.T) {
		// SendEager never offers single copy, even to a waiting receiver:
		// the ring carries the whole message.
		ts := pair(t, 50*time.Microsecond)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		tag := transport.Tag{Seq: 9}
		msg, got := transporttest.Pattern(n, 19), make([]byte, n)
		done := make(chan error, 1)
		go func() { done <- ts[0].Recv(ctx, 1, tag, got) }()
		waitSleeping(ctx, t, ts[0].peers[1])
		before := ts[1].peers[0].outHead
		if err := transport.SendEager(ctx, ts[1], 0, tag, msg); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, msg) {
			t.Fatal("payload differs")
		}
		if carried := ts[1].peers[0].outHead - before; carried != recordAlign+n {
			t.Errorf("the ring carried %d bytes, want the header and the whole message (%d)", carried, recordAlign+n)
		}
	})
	t.Run("no-receiver", func(t *testing.T) {
		ts := pair(t, 50*time.Microsecond)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		msg, got := transporttest.Pattern(n, 12), make([]byte, n)
		sent := make(chan error, 1)
		go func() { sent <- ts[1].Send(ctx, 0, transport.Tag{Seq: 2}, msg) }()
		time.Sleep(20 * time.Millisecond) // past claimWait: the sender writes it inline
		if err := ts[0].Recv(ctx, 1, transport.Tag{Seq: 2}, got); err != nil {
			t.Fatal(err)
		}
		if err := <-sent; err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, msg) {
			t.Fatal("payload differs")
		}
	})
	t.Run("read-fails", func(t *testing.T) {
		ts := pair(t, 50*time.Microsecond)
		tag := transport.Tag{Seq: 3}
		msg := transporttest.Pattern(1000, 13)
		// Rank 1 offers a descriptor no one can read.
		p := ts[1].peers[0]
		p.mu.Lock()
		h := wire.Header{Kind: wire.KindData, Length: descBytes, Seq: tag.Seq, Aux: uint64(len(msg))}
		h.Put(p.out.data)
		d := p.out.data[recordAlign : recordAlign+descBytes]
		clear(d)
		d[descPid] = 1 // pid 1, address 0: the read fails
		p.publish(recordAlign+descBytes, tag)
		got := make([]byte, len(msg))
		done := make(chan error, 1)
		go func() { done <- ts[0].Recv(context.Background(), 1, tag, got) }()
		state := (*uint32)(unsafe.Pointer(&d[descState]))
		for deadline := time.Now().Add(5 * time.Second); atomic.LoadUint32(state) != stInline; {
			if time.Now().After(deadline) {
				t.Fatalf("descriptor state %d, want inline", atomic.LoadUint32(state))
			}
			time.Sleep(time.Millisecond)
		}
		if c := atomic.LoadUint32(p.out.cma); c != 0 {
			t.Errorf("the link still offers single copy after a failed read")
		}
		copy(p.out.data[recordAlign+descBytes:], msg)
		p.outHead = recordAlign + descBytes + 1024 // payload and padding
		p.publish(p.outHead, tag)
		p.mu.Unlock()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, msg) {
			t.Fatal("payload differs")
		}
	})
}

// BenchmarkBothWays4MiB: two ranks each send a 4 MiB message to the other
// and receive the other's at the same time (as a ring all-reduce does),
// by single copy and through the ring.
func BenchmarkBothWays4MiB(b *testing.B) {
	for _, mode := range []struct {
		name       string
		rendezvous int64
	}{{"single-copy", 0}, {"ring", -1}} {
		b.Run(mode.name, func(b *testing.B) {
			ts, errs := connectWorld(b, 2, func(int) Options {
				return Options{Prefix: testPrefix, RendezvousBytes: mode.rendezvous}
			})
			for _, err := range errs {
				if err != nil {
					b.Fatal(err)
				}
			}
			defer ts[0].Close()
			defer ts[1].Close()
			const size = 4 << 20
			ctx := context.Background()
			bufs := [2][2][]byte{{make([]byte, size), make([]byte, size)}, {make([]byte, size), make([]byte, size)}}
			b.SetBytes(2 * size)
			step := func(i int, r int) error {
				tag := transport.Tag{Seq: uint64(i)}
				sent := make(chan error, 1)
				go func() { sent <- ts[r].Send(ctx, 1-r, tag, bufs[r][0]) }()
				err := ts[r].Recv(ctx, 1-r, tag, bufs[r][1])
				return errors.Join(err, <-sent)
			}
			done := make(chan error, 1)
			n := b.N
			go func() {
				for i := range n {
					if err := step(i, 1); err != nil {
						done <- err
						return
					}
				}
				done <- nil
			}()
			for i := range n {
				if err := step(i, 0); err != nil {
					b.Fatal(err)
				}
			}
			if err := <-done; err != nil {
				b.Fatal(err)
			}
		})
	}
}

// TestBellRingsOncePerSleep is a transcript of the receiver's bell: a
// publish rings it only while a receiver has armed it, and only the first
// publish after the arming does.
func TestBellRingsOncePerSleep(t *testing.T) {
	ts := pair(t, -1)
	p := ts[1].peers[0] // rank 1's ring in rank 0's segment
	r := &p.out
	tag := transport.Tag{Seq: 1}
	p.mu.Lock()
	defer p.mu.Unlock()
	bell := atomic.LoadUint32(r.bell)
	step := func(what string, arm bool, wantRing bool) {
		t.Helper()
		if arm {
			atomic.StoreUint32(r.sleepers, 1)
		}
		p.publish(p.outHead, tag)
		rang := atomic.LoadUint32(r.bell) != bell
		bell = atomic.LoadUint32(r.bell)
		if rang != wantRing {
			t.Errorf("%s: rang %v, want %v", what, rang, wantRing)
		}
		if a := atomic.LoadUint32(r.sleepers); a != 0 {
			t.Errorf("%s: bell still armed (%d) after a publish", what, a)
		}
	}
	step("publish, no receiver asleep", false, false)
	step("publish after a receiver armed the bell", true, true)
	step("second publish, the receiver not asleep again", false, false)
	step("publish after it armed the bell again", true, true)
}
