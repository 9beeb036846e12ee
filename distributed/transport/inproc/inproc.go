package inproc

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/cohortml/cohort/distributed/transport"
	"github.com/cohortml/cohort/distributed/transport/internal/demux"
)

var (
	errPeerClosed = errors.New("closed its transport")
	errPeerKilled = errors.New("killed")
)

// Transport is one rank's endpoint of a mesh. It is safe for concurrent use.
type Transport struct {
	rank  int
	peers []*Transport // the whole mesh, by rank, including this one
	in    []*demux.Box // in[from]: messages from rank from

	mu   sync.Mutex
	down error // nil while open; errPeerClosed or errPeerKilled after Close or Kill
}

var _ transport.Transport = (*Transport)(nil)

// NewMesh returns worldSize connected endpoints; element r is rank r. It
// panics if worldSize < 1.
func NewMesh(worldSize int) []*Transport {
	if worldSize < 1 {
		panic(fmt.Sprintf("inproc: NewMesh: world size %d, want >= 1", worldSize))
	}
	ts := make([]*Transport, worldSize)
	for r := range ts {
		t := &Transport{rank: r, in: make([]*demux.Box, worldSize)}
		for from := range t.in {
			t.in[from] = demux.New(from)
		}
		ts[r] = t
	}
	for _, t := range ts {
		t.peers = ts
	}
	return ts
}

// Rank returns this endpoint's rank.
func (t *Transport) Rank() int { return t.rank }

// Size returns the number of ranks in the mesh.
func (t *Transport) Size() int { return len(t.peers) }

func (t *Transport) state() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.down
}

// check fails a call (op, with peer r and tag) to a rank out of range,
// then one on a closed transport.
func (t *Transport) check(op string, r int, tag transport.Tag) error {
	if r < 0 || r >= len(t.peers) {
		return fmt.Errorf("inproc: rank %d: %s rank %d: out of range [0, %d)", t.rank, op, r, len(t.peers))
	}
	if t.state() != nil {
		return fmt.Errorf("inproc: rank %d: %s rank %d (%v): %w", t.rank, op, r, tag, transport.ErrClosed)
	}
	return nil
}

// Send delivers a copy of p to rank to under tag. It does not block; p may
// be reused as soon as it returns. Sending to a rank that has closed or
// been killed fails with a *transport.PeerError.
func (t *Transport) Send(ctx context.Context, to int, tag transport.Tag, p []byte) error {
	if err := t.check("send to", to, tag); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("inproc: rank %d: send to rank %d (%v): %w", t.rank, to, tag, err)
	}
	dst := t.peers[to]
	if err := dst.state(); err != nil {
		return fmt.Errorf("inproc: rank %d: send to rank %d (%v): %w", t.rank, to, tag,
			&transport.PeerError{Peer: to, Err: err})
	}
	m := dst.in[t.rank].Begin(tag, len(p))
	m.Deliver(p)
	return nil
}

// Recv receives the next message from rank from under tag into p; see
// transport.Transport. A Recv cancelled by ctx consumes no message.
func (t *Transport) Recv(ctx context.Context, from int, tag transport.Tag, p []byte) error {
	if err := t.check("recv from", from, tag); err != nil {
		return err
	}
	if err := t.in[from].Recv(ctx, tag, p); err != nil {
		return fmt.Errorf("inproc: rank %d: recv from rank %d (%v): %w", t.rank, from, tag, err)
	}
	return nil
}

// Close shuts the endpoint down: its pending calls fail with
// transport.ErrClosed, and peers receiving from it fail with a
// *transport.PeerError once they have taken the messages it already sent.
// Close is idempotent.
func (t *Transport) Close() error {
	t.shutdown(errPeerClosed)
	return nil
}

// Kill simulates the crash of this rank: like Close, but peers are told it
// was killed. Kill after Close (or Kill) does nothing.
func (t *Transport) Kill() { t.shutdown(errPeerKilled) }

func (t *Transport) shutdown(why error) {
	t.mu.Lock()
	if t.down != nil {
		t.mu.Unlock()
		return
	}
	t.down = why
	t.mu.Unlock()
	for _, b := range t.in {
		b.Close(transport.ErrClosed)
	}
	for _, p := range t.peers {
		if p != t {
			p.in[t.rank].Fail(&transport.PeerError{Peer: t.rank, Err: why})
		}
	}
}
