package native

import (
	"encoding/binary"
	"fmt"

	"github.com/cohortml/cohort/distributed"
)

// An abort notice tells the peers why this rank broke a group. It travels
// under a tag no op uses (seq 2^64−1 of the group) as one fixed-size
// message, little-endian:
//
//	offset  size  field
//	0       4     magic "coha"
//	4       4     culprit peer (global rank, int32; −1 for none)
//	8       8     seq of the op that failed
//	16      1     length of the op name
//	17      15    op name (truncated)
//	32      2     length of the cause's text
//	34      478   the cause's text (truncated)
const (
	noticeLen   = 512
	noticeMagic = 0x61686f63 // "coha"
	noticeSeq   = ^uint64(0)

	noticeOffMagic   = 0
	noticeOffPeer    = 4
	noticeOffSeq     = 8
	noticeOffNameLen = 16
	noticeOffName    = 17
	noticeNameBytes  = 15
	noticeOffTextLen = noticeOffName + noticeNameBytes
	noticeOffText    = noticeOffTextLen + 2
	noticeTextBytes  = noticeLen - noticeOffText
)

// encodeNotice lays out an abort notice for cause.
func encodeNotice(cause *distributed.OpError) []byte {
	msg := make([]byte, noticeLen)
	le := binary.LittleEndian
	le.PutUint32(msg[noticeOffMagic:], noticeMagic)
	le.PutUint32(msg[noticeOffPeer:], uint32(int32(cause.Peer)))
	le.PutUint64(msg[noticeOffSeq:], cause.Seq)
	name := cause.Op
	if len(name) > noticeNameBytes {
		name = name[:noticeNameBytes]
	}
	msg[noticeOffNameLen] = byte(len(name))
	copy(msg[noticeOffName:noticeOffName+noticeNameBytes], name)
	n := copy(msg[noticeOffText:], cause.Err.Error())
	le.PutUint16(msg[noticeOffTextLen:], uint16(n))
	return msg
}

// decodeNotice reads a notice from rank from into the cause it carries.
// Lengths beyond their fields are clamped, so any 512 bytes with the magic
// decode without panicking.
func decodeNotice(msg []byte, from int) (*distributed.OpError, error) {
	le := binary.LittleEndian
	if len(msg) != noticeLen || le.Uint32(msg[noticeOffMagic:]) != noticeMagic {
		return nil, fmt.Errorf("distributed: malformed abort notice from rank %d", from)
	}
	name := string(msg[noticeOffName : noticeOffName+min(int(msg[noticeOffNameLen]), noticeNameBytes)])
	text := string(msg[noticeOffText : noticeOffText+min(int(le.Uint16(msg[noticeOffTextLen:])), noticeTextBytes)])
	return &distributed.OpError{Op: name, Seq: le.Uint64(msg[noticeOffSeq:]), Rank: from, Peer: int(int32(le.Uint32(msg[noticeOffPeer:]))),
		Err: &distributed.RemoteAbortError{From: from, Msg: text}}, nil
}
