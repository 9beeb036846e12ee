// Package transport moves tagged, ordered byte messages between the ranks of
// a group. Implementations: inproc (channels, for tests), tcp (sockets,
// any hosts), shm (shared-memory rings between ranks on one host) and route
// (each peer served by one of several transports: shm within a host, tcp
// across hosts); transporttest is their shared conformance suite.
//
// Transports know nothing of the store: peer addresses are exchanged by the
// caller (the native backend, distributed/backend/native) and handed to
// the constructors.
package transport

import (
	"context"
	"errors"
	"fmt"
)

// ErrClosed is returned by calls on a closed transport.
var ErrClosed = errors.New("transport: closed")

// Tag identifies one message stream between a pair of ranks so concurrent
// ops never mix: the group, the op's sequence number in that group, and the
// step of the algorithm within the op.
type Tag struct {
	Group uint32
	Seq   uint64
	Step  uint32
}

func (t Tag) String() string { return fmt.Sprintf("group %d seq %d step %d", t.Group, t.Seq, t.Step) }

// Transport sends and receives whole messages. Messages between one pair of
// ranks with the same Tag arrive in the order sent; messages with different
// tags may be received in any order (a receiver waiting on one tag is not
// blocked by messages queued under another).
//
// Send and Recv are safe for concurrent use. Send may return before the
// peer has received the message, but p may be reused once Send returns.
// Recv blocks until a message with the tag arrives from the peer and its
// length equals len(p); a length mismatch is an error naming both lengths
// that wraps a *LengthError carrying the message's first bytes.
//
// A peer that dies or disconnects makes pending and later calls involving
// it fail with an error wrapping *PeerError, promptly (not at ctx's deadline).
type Transport interface {
	Rank() int
	Size() int
	Send(ctx context.Context, to int, tag Tag, p []byte) error
	Recv(ctx context.Context, from int, tag Tag, p []byte) error
	Close() error
}

// PeerError reports a failure of the link to one peer.
type PeerError struct {
	Peer int
	Err  error
}

func (e *PeerError) Error() string { return fmt.Sprintf("transport: peer %d: %v", e.Peer, e.Err) }
func (e *PeerError) Unwrap() error { return e.Err }

// Check is the check an implementation makes of a Send or Recv of rank
// self (op "send to" or "recv from") with rank r under tag: r must be a
// rank of the world, peers[r] being this rank's connection to it, and
// either self or one that peers holds (not the zero P); and the
// transport must not be closed (ErrClosed). pkg prefixes the errors.
func Check[P comparable](pkg string, self int, op string, r int, tag Tag, peers []P, closed bool) error {
	var none P
	switch {
	case r < 0 || r >= len(peers):
		return fmt.Errorf("%s: rank %d: %s rank %d: out of range [0, %d)", pkg, self, op, r, len(peers))
	case r != self && peers[r] == none:
		return fmt.Errorf("%s: rank %d: %s rank %d: not a peer of this transport (Options.Peers)", pkg, self, op, r)
	case closed:
		return fmt.Errorf("%s: rank %d: %s rank %d (%v): %w", pkg, self, op, r, tag, ErrClosed)
	}
	return nil
}

// ErrLength is wrapped by the error of a Recv whose buffer length differs
// from the length of the message waiting under its tag. The message stays
// queued. Every transport's such error also wraps a *LengthError.
var ErrLength = errors.New("transport: message length differs from buffer length")

// LengthPrefixBytes bounds LengthError.Prefix.
const LengthPrefixBytes = 64

// LengthError is the error of a Recv whose buffer is Want bytes long while
// the next message from Peer under Tag is Got bytes long. Transports wrap it
// with their own coordinates (rank, peer, tag); it wraps ErrLength.
//
// Prefix holds the first min(Got, LengthPrefixBytes) bytes of the message,
// so that a receiver whose messages start with a header can tell what the
// sender meant to send. The Recv waits for those bytes to arrive; Prefix is
// shorter only when they never do (the sender failed mid-message, the
// receive was cancelled, or the transport closed). Prefix is the caller's
// to keep. The message itself stays queued for a Recv that fits.
type LengthError struct {
	Peer      int
	Tag       Tag
	Got, Want int
	Prefix    []byte
}

func (e *LengthError) Error() string {
	return fmt.Sprintf("message is %d bytes, buffer is %d bytes", e.Got, e.Want)
}

func (e *LengthError) Unwrap() error { return ErrLength }

// ErrAuth is wrapped by the error of a connection refused because one side
// could not prove it holds the job's token (or only one side has one).
var ErrAuth = errors.New("transport: authentication failed")

// An EagerSender can be told that a send must not wait for its receiver.
// A transport may hold a large Send back until the matching Recv comes
// (shm's single copy reads the message straight out of the sender's
// memory), which serves a sender whose receiver is already waiting; a
// caller that runs its sends and receives in turn on one goroutine (a
// collective plan run inline) has a peer doing the same, and neither
// receives before its own send returns.
type EagerSender interface {
	// SendEager is Send that completes without waiting for the matching
	// Recv, however long the message (the transport still waits for
	// room, which the peer frees without a Recv).
	SendEager(ctx context.Context, to int, tag Tag, p []byte) error
}

// SendEager sends p by t's SendEager where t is an EagerSender, and by
// Send otherwise (a transport that never waits for the receiver).
func SendEager(ctx context.Context, t Transport, to int, tag Tag, p []byte) error {
	if e, ok := t.(EagerSender); ok {
		return e.SendEager(ctx, to, tag, p)
	}
	return t.Send(ctx, to, tag, p)
}

// A Folder hands a received message's bytes to the receiver where they
// arrive (in a shared-memory ring), sparing their copy into a buffer when
// the receiver reads them only once, as a reduction does.
type Folder interface {
	// RecvFold receives the next message from rank from under tag, which
	// must be len(scratch) bytes long (as Recv's p), by calling fold(off,
	// q) for consecutive pieces q of it that together cover [0,
	// len(scratch)) in order; each piece is a whole number of units
	// (len(scratch) must be one), and q is valid only during the call. It
	// may receive the message into scratch and fold that, and must where
	// it cannot do better. Its errors are Recv's. One that fails before
	// its first fold call consumes no message, as Recv; one that fails
	// after it has consumed the message, whose unfolded rest is
	// discarded.
	RecvFold(ctx context.Context, from int, tag Tag, scratch []byte, unit int, fold func(off int, q []byte)) error
}

// RecvFold receives the next message from rank from under tag by t's
// RecvFold where t is a Folder; otherwise it receives it into scratch by
// Recv and folds it whole.
func RecvFold(ctx context.Context, t Transport, from int, tag Tag, scratch []byte, unit int, fold func(off int, q []byte)) error {
	if f, ok := t.(Folder); ok {
		return f.RecvFold(ctx, from, tag, scratch, unit, fold)
	}
	if err := t.Recv(ctx, from, tag, scratch); err != nil {
		return err
	}
	fold(0, scratch)
	return nil
}
