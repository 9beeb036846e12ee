package collective

import (
	"encoding/binary"
	"fmt"
)

// headerLen is the size of the fingerprint header exchanged at the start of
// every op.
const headerLen = 40

// headerMagic opens every header ("coh1").
const headerMagic = 0x31686f63

// header is what a rank tells its peers about the op it is running: enough
// to detect ranks that issued different ops at the same sequence number.
type header struct {
	group uint32
	rank  uint32 // sender's rank in the group
	seq   uint64
	call  Call
}

func (h *header) encode(p []byte) {
	le := binary.LittleEndian
	le.PutUint32(p[0:], headerMagic)
	p[4], p[5], p[6], p[7] = byte(h.call.Kind), byte(h.call.DType), byte(h.call.Op), 0
	le.PutUint32(p[8:], h.group)
	le.PutUint32(p[12:], h.rank)
	le.PutUint64(p[16:], h.seq)
	le.PutUint64(p[24:], uint64(h.call.Count))
	le.PutUint32(p[32:], uint32(int32(h.call.Root)))
	le.PutUint32(p[36:], uint32(int32(h.call.Tag)))
}

func decodeHeader(p []byte) (header, error) {
	le := binary.LittleEndian
	if len(p) != headerLen || le.Uint32(p) != headerMagic {
		return header{}, fmt.Errorf("collective: malformed op header % x", p[:min(len(p), 8)])
	}
	count := le.Uint64(p[24:])
	if count > 1<<62 {
		return header{}, fmt.Errorf("collective: malformed op header: count %d", count)
	}
	return header{
		group: le.Uint32(p[8:]),
		rank:  le.Uint32(p[12:]),
		seq:   le.Uint64(p[16:]),
		call: Call{
			Kind:  Kind(p[4]),
			DType: DType(p[5]),
			Op:    Op(p[6]),
			Count: int(count),
			Root:  int(int32(le.Uint32(p[32:]))),
			Tag:   int(int32(le.Uint32(p[36:]))),
		},
	}, nil
}

// matches reports whether a peer's call (theirs) fits this rank's call
// (mine) at the same sequence number.
func matches(mine, theirs Call) bool {
	switch mine.Kind {
	case Recv:
		return theirs.Kind == Send && theirs.DType == mine.DType && theirs.Count == mine.Count && theirs.Tag == mine.Tag
	case Send:
		return theirs.Kind == Recv && theirs.DType == mine.DType && theirs.Count == mine.Count && theirs.Tag == mine.Tag
	case Barrier:
		return theirs.Kind == Barrier
	case Agree:
		return theirs.Kind == Agree && theirs.Count == mine.Count && theirs.Root == mine.Root
	}
	if theirs.Kind != mine.Kind || theirs.DType != mine.DType || theirs.Count != mine.Count {
		return false
	}
	if mine.Kind.reduces() && theirs.Op != mine.Op {
		return false
	}
	return !mine.Kind.rooted() || theirs.Root == mine.Root
}

// DesyncError reports ranks that issued different ops at the same sequence
// number of a group. Ranks are the transport's (global) ranks. PeerCall is
// the peer's call as its header states it, read from the front of the
// peer's first message even when that message's length does not fit this
// rank's call (see transport.LengthError). PeerCall is nil only when the
// peer's first message does not start with a header: it was shorter than
// one, or cut short before one arrived.
type DesyncError struct {
	Group    uint32
	Seq      uint64
	Rank     int
	Call     Call
	Peer     int
	PeerCall *Call
}

func (e *DesyncError) Error() string {
	theirs := "sent a message that does not fit it (it called another op)"
	if e.PeerCall != nil {
		theirs = "called " + e.PeerCall.String()
	}
	return fmt.Sprintf("collective: desync at group %d seq %d: rank %d called %v but rank %d %s",
		e.Group, e.Seq, e.Rank, e.Call, e.Peer, theirs)
}
