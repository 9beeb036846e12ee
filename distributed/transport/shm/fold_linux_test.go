package shm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/cohortml/cohort/distributed/transport"
	"github.com/cohortml/cohort/distributed/transport/transporttest"
)

// folded records what a fold function was handed.
type folded struct {
	unit   int
	got    []byte
	pieces int
	err    error
}

func (f *folded) fold(off int, q []byte) {
	switch {
	case f.err != nil:
	case off != len(f.got):
		f.err = fmt.Errorf("piece at %d after %d bytes", off, len(f.got))
	case len(q) == 0 || len(q)%f.unit != 0:
		f.err = fmt.Errorf("piece of %d bytes at %d, unit %d", len(q), off, f.unit)
	}
	f.got = append(f.got, q...)
	f.pieces++
}

// TestRecvFold: a message taken straight out of the ring is folded from
// the ring in whole units, in order, never landing in the scratch buffer:
// messages longer than the ring, starting anywhere in it (so that they
// wrap), received while they are sent. One queued in the box (another
// tag's receiver moved it there) arrives in scratch and is folded whole.
func TestRecvFold(t *testing.T) {
	ts := pair(t, 50*time.Microsecond)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	seq := uint64(0)
	for _, shift := range []int{0, 8, 100} {
		for _, n := range []int{4, 1000, 60 << 10, 200<<10 + 12} {
			for _, unit := range []int{1, 4, 12} {
				if n%unit != 0 {
					continue
				}
				// A receiver that waits past Spin plus directWait (a
				// loaded host descheduling the sender) rightly takes the
				// message through the box, into scratch; folding from
				// the ring must happen in one of a few tries.
				const tries = 5
				for try := 1; ; try++ {
					seq++
					if shift > 0 { // move the ring's head
						if err := ts[1].Send(ctx, 0, transport.Tag{Seq: seq, Step: 1}, make([]byte, shift)); err != nil {
							t.Fatal(err)
						}
						if err := ts[0].Recv(ctx, 1, transport.Tag{Seq: seq, Step: 1}, make([]byte, shift)); err != nil {
							t.Fatal(err)
						}
					}
					tag := transport.Tag{Seq: seq}
					msg := transporttest.Pattern(n, seq)
					sent := make(chan error, 1)
					go func() { sent <- ts[1].Send(ctx, 0, tag, msg) }()
					scratch := make([]byte, n)
					f := &folded{unit: unit}
					if err := ts[0].RecvFold(ctx, 1, tag, scratch, unit, f.fold); err != nil {
						t.Fatalf("n=%d unit=%d shift=%d: %v", n, unit, shift, err)
					}
					if err := <-sent; err != nil {
						t.Fatal(err)
					}
					if f.err != nil || !bytes.Equal(f.got, msg) {
						t.Fatalf("n=%d unit=%d shift=%d: folded %d bytes in %d pieces (%v), want the message", n, unit, shift, len(f.got), f.pieces, f.err)
					}
					if !bytes.ContainsFunc(scratch, func(r rune) bool { return r != 0 }) {
						break
					}
					if try == tries {
						t.Fatalf("n=%d unit=%d shift=%d: the message went through scratch in %d tries", n, unit, shift, tries)
					}
				}
			}
		}
	}
	t.Run("box", func(t *testing.T) {
		a, b := transport.Tag{Seq: 1 << 40}, transport.Tag{Seq: 1<<40 + 1}
		ma, mb := transporttest.Pattern(4096, 1), transporttest.Pattern(16, 2)
		if err := ts[1].Send(ctx, 0, a, ma); err != nil {
			t.Fatal(err)
		}
		if err := ts[1].Send(ctx, 0, b, mb); err != nil {
			t.Fatal(err)
		}
		if err := ts[0].Recv(ctx, 1, b, make([]byte, 16)); err != nil { // moves a into the box
			t.Fatal(err)
		}
		scratch := make([]byte, 4096)
		f := &folded{unit: 4}
		if err := ts[0].RecvFold(ctx, 1, a, scratch, 4, f.fold); err != nil {
			t.Fatal(err)
		}
		if f.err != nil || !bytes.Equal(f.got, ma) || f.pieces != 1 || !bytes.Equal(scratch, ma) {
			t.Fatalf("folded %d pieces (%v), scratch holds the message: %v", f.pieces, f.err, bytes.Equal(scratch, ma))
		}
	})
	t.Run("bad-unit", func(t *testing.T) {
		err := ts[0].RecvFold(ctx, 1, transport.Tag{Seq: 1 << 41}, make([]byte, 10), 4, func(int, []byte) {})
		if err == nil {
			t.Fatal("10 bytes in 4-byte units: no error")
		}
	})
}

// TestRecvFoldCancelledMidMessage: a folding receiver whose ctx ends after
// it folded part of its message fails, and the message is gone: its rest
// is discarded as it comes, and the next message under the tag is
// received intact.
func TestRecvFoldCancelledMidMessage(t *testing.T) {
	ts := pair(t, -1)
	tag := transport.Tag{Group: 3, Seq: 9, Step: 1}
	msg := transporttest.Pattern(1000, 3)
	// Rank 1 publishes the header and the first 400 bytes only.
	rest := publishPart(ts[1].peers[0], tag, msg, 400)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	f := &folded{unit: 8}
	err := ts[0].RecvFold(ctx, 1, tag, make([]byte, len(msg)), 8, f.fold)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("first receive: %v, want a deadline error", err)
	}
	if f.err != nil || !bytes.Equal(f.got, msg[:400]) {
		t.Fatalf("folded %d bytes (%v), want the 400 published", len(f.got), f.err)
	}
	rest()
	next := transporttest.Pattern(1000, 4)
	if err := ts[1].Send(context.Background(), 0, tag, next); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(next))
	ctx2, cancel2 := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel2()
	if err := ts[0].Recv(ctx2, 1, tag, got); err != nil {
		t.Fatalf("second receive: %v", err)
	}
	if !bytes.Equal(got, next) {
		t.Error("second receive: not the next message")
	}
}

// TestFoldRingSplitUnit: a unit that the ring's end cuts in two is put
// together and folded whole, between the whole units before and after.
func TestFoldRingSplitUnit(t *testing.T) {
	data := make([]byte, 64)
	for i := range data {
		data[i] = byte(i)
	}
	p := &peer{in: ring{data: data}}
	f := &folded{unit: 12}
	// 36 bytes from offset 50: 12 whole ones to the end (50..61), a unit
	// of 62, 63 and 0..9, then 10..21.
	f.got = make([]byte, 24) // as if 24 bytes were folded before
	p.foldRing(sink{unit: 12, fold: f.fold}, 24, 50, 36)
	want := append(append([]byte{}, data[50:64]...), data[:22]...)
	if f.err != nil || !bytes.Equal(f.got[24:], want) || f.pieces != 3 {
		t.Fatalf("folded %v in %d pieces (%v), want %v in 3", f.got[24:], f.pieces, f.err, want)
	}
}
