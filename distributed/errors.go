package distributed

import (
	"errors"
	"fmt"
)

// ErrClosed is wrapped (with ErrAborted) by the errors of ops issued on, or
// still pending in, a closed group.
var ErrClosed = errors.New("distributed: process group closed")

// OpError is the error of an op on a group that is, or has just become,
// broken. It wraps ErrAborted and its cause: for the op that broke the
// group, the failure itself (a *collective.DesyncError, a
// *transport.PeerError, a context error, …); for every other op, the
// *OpError of the op that broke it, on this rank or, through an abort
// notice, on another.
type OpError struct {
	Op   string // "allreduce", "broadcast", …
	Seq  uint64 // the op's sequence number in its group (0 if never issued)
	Rank int    // the reporting process's global rank
	// Peer is the global rank implicated in the failure (a dead, silent or
	// mismatched peer), or −1 if none is known.
	Peer int
	Err  error
}

func (e *OpError) Error() string {
	var cause *OpError
	if errors.As(e.Err, &cause) && cause != e {
		return fmt.Sprintf("distributed: rank %d: %s seq %d: process group aborted by %s", e.Rank, e.Op, e.Seq, cause.describe())
	}
	return "distributed: " + e.describe()
}

// describe renders the op and its cause without the package prefix.
func (e *OpError) describe() string {
	peer := ""
	if e.Peer >= 0 {
		peer = fmt.Sprintf(" (peer %d)", e.Peer)
	}
	return fmt.Sprintf("rank %d: %s seq %d%s: %v", e.Rank, e.Op, e.Seq, peer, e.Err)
}

// Unwrap returns ErrAborted and the cause.
func (e *OpError) Unwrap() []error { return []error{ErrAborted, e.Err} }

// RemoteAbortError is the cause carried by an abort notice: another rank's
// group broke and it told this one. It is the Err of an *OpError whose Rank
// is the sender and whose Op, Seq and Peer are those of its failure.
type RemoteAbortError struct {
	From int    // global rank that sent the notice
	Msg  string // its failure, as text (up to about 470 bytes)
}

func (e *RemoteAbortError) Error() string { return e.Msg }
