package route

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/cohortml/cohort/distributed/transport"
)

// Transport sends each peer's messages through the part that reaches it.
// It is safe for concurrent use, as its parts are.
type Transport struct {
	rank int
	via  []transport.Transport // by peer rank, this rank included
	// parts are the distinct elements of via, in order of first appearance.
	parts     []transport.Transport
	closed    atomic.Bool
	closeOnce sync.Once
	closeErr  error
}

var _ transport.Transport = (*Transport)(nil)
var _ transport.Folder = (*Transport)(nil)

// New returns a transport of len(via) ranks in which rank r is reached
// through via[r]; via[Rank()] carries the messages this rank sends to
// itself. Every element must be non-nil and report the same rank and a
// size of len(via); several ranks may (and normally do) share a part.
// Parts are told apart with ==, so each must be a comparable value (a
// pointer, as every transport of this module is). The returned transport
// owns the parts: its Close closes each once. On error the parts stay the
// caller's.
func New(via []transport.Transport) (*Transport, error) {
	if len(via) == 0 {
		return nil, errors.New("route: New: no transports (want one per rank)")
	}
	t := &Transport{via: append([]transport.Transport(nil), via...)}
	for r, p := range via {
		if p == nil {
			return nil, fmt.Errorf("route: New: no transport for rank %d", r)
		}
		if r == 0 {
			t.rank = p.Rank()
		}
		if p.Size() != len(via) {
			return nil, fmt.Errorf("route: New: %d transports (one per rank), but the one for rank %d has %d ranks", len(via), r, p.Size())
		}
		if p.Rank() != t.rank {
			return nil, fmt.Errorf("route: New: the transport for rank %d is rank %d's, the one for rank 0 rank %d's (want all of one rank)", r, p.Rank(), t.rank)
		}
		if !containsPart(t.parts, p) {
			t.parts = append(t.parts, p)
		}
	}
	return t, nil
}

// containsPart reports whether p is among parts.
func containsPart(parts []transport.Transport, p transport.Transport) bool {
	for _, q := range parts {
		if q == p {
			return true
		}
	}
	return false
}

// Rank returns this transport's rank.
func (t *Transport) Rank() int { return t.rank }

// Size returns the world size.
func (t *Transport) Size() int { return len(t.via) }

// Via returns the transport that reaches rank r, or nil if r is out of
// range; it stays owned by t.
func (t *Transport) Via(r int) transport.Transport {
	if r < 0 || r >= len(t.via) {
		return nil
	}
	return t.via[r]
}

func (t *Transport) check(op string, r int, tag transport.Tag) error {
	return transport.Check("route", t.rank, op, r, tag, t.via, t.closed.Load())
}

// Send sends p to rank to under tag through the part that reaches it; see
// transport.Transport. Errors are the part's.
func (t *Transport) Send(ctx context.Context, to int, tag transport.Tag, p []byte) error {
	if err := t.check("send to", to, tag); err != nil {
		return err
	}
	return t.via[to].Send(ctx, to, tag, p)
}

// SendEager sends p to rank to under tag through the part that reaches
// it, without waiting for the receiver (see transport.SendEager). Errors
// are the part's.
func (t *Transport) SendEager(ctx context.Context, to int, tag transport.Tag, p []byte) error {
	if err := t.check("send to", to, tag); err != nil {
		return err
	}
	return transport.SendEager(ctx, t.via[to], to, tag, p)
}

// Recv receives the next message from rank from under tag into p through
// the part that reaches it; see transport.Transport. Errors are the
// part's.
func (t *Transport) Recv(ctx context.Context, from int, tag transport.Tag, p []byte) error {
	if err := t.check("recv from", from, tag); err != nil {
		return err
	}
	return t.via[from].Recv(ctx, from, tag, p)
}

// RecvFold receives the next message from rank from under tag through
// the part that reaches it, folding it as that part does (see
// transport.RecvFold). Errors are the part's.
func (t *Transport) RecvFold(ctx context.Context, from int, tag transport.Tag, scratch []byte, unit int, fold func(off int, q []byte)) error {
	if err := t.check("recv from", from, tag); err != nil {
		return err
	}
	return transport.RecvFold(ctx, t.via[from], from, tag, scratch, unit, fold)
}

// Close closes every part, concurrently (each may wait a while for its
// peers' goodbyes), and returns their errors joined. Pending calls fail
// with transport.ErrClosed, as each part's do. Close is idempotent.
func (t *Transport) Close() error {
	t.closeOnce.Do(func() {
		t.closed.Store(true)
		errs := make([]error, len(t.parts))
		var wg sync.WaitGroup
		for i, p := range t.parts {
			wg.Go(func() { errs[i] = p.Close() })
		}
		wg.Wait()
		t.closeErr = errors.Join(errs...)
	})
	return t.closeErr
}
