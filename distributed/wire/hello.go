package wire

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
)

// NonceBytes is the size of a handshake nonce; MACBytes of its proof.
const (
	NonceBytes = 32
	MACBytes   = sha256.Size
)

// HelloBytes is the size of an encoded Hello.
const HelloBytes = 4*4 + NonceBytes + MACBytes

// MaxReasonBytes bounds the text of a KindRefuse frame.
const MaxReasonBytes = 512

// ErrHello is wrapped by errors decoding a handshake payload.
var ErrHello = errors.New("wire: malformed handshake")

// Hello is the payload of the handshake frames (KindHello, KindWelcome,
// KindAuth). Rank is the sender's rank, Peer the rank it means to reach,
// Conn the index of the connection within the pair (for transports with
// several connections per pair of ranks).
type Hello struct {
	Rank      uint32
	WorldSize uint32
	Peer      uint32
	Conn      uint32
	Nonce     [NonceBytes]byte
	MAC       [MACBytes]byte // zero when the sender has no token
}

// Append appends the encoding of h to dst.
func (h *Hello) Append(dst []byte) []byte {
	dst = binary.LittleEndian.AppendUint32(dst, h.Rank)
	dst = binary.LittleEndian.AppendUint32(dst, h.WorldSize)
	dst = binary.LittleEndian.AppendUint32(dst, h.Peer)
	dst = binary.LittleEndian.AppendUint32(dst, h.Conn)
	dst = append(dst, h.Nonce[:]...)
	return append(dst, h.MAC[:]...)
}

// DecodeHello decodes a handshake payload, which must be exactly
// HelloBytes long.
func DecodeHello(p []byte) (Hello, error) {
	if len(p) != HelloBytes {
		return Hello{}, fmt.Errorf("%w: %d bytes, want %d", ErrHello, len(p), HelloBytes)
	}
	h := Hello{
		Rank:      binary.LittleEndian.Uint32(p[0:]),
		WorldSize: binary.LittleEndian.Uint32(p[4:]),
		Peer:      binary.LittleEndian.Uint32(p[8:]),
		Conn:      binary.LittleEndian.Uint32(p[12:]),
	}
	copy(h.Nonce[:], p[16:16+NonceBytes])
	copy(h.MAC[:], p[16+NonceBytes:])
	return h, nil
}

// MAC returns HMAC-SHA256 keyed with token over label and the handshake's
// fields: both nonces (the verifier's first, so each side's proof answers
// its own challenge), the two ranks, the world size and the connection
// index. A proof is thus bound to one direction, one pair and one
// connection of one handshake.
func MAC(token []byte, label string, verifierNonce, proverNonce *[NonceBytes]byte, proverRank, verifierRank, worldSize, conn uint32) [MACBytes]byte {
	m := hmac.New(sha256.New, token)
	m.Write([]byte(label))
	m.Write(verifierNonce[:])
	m.Write(proverNonce[:])
	var b [16]byte
	binary.LittleEndian.PutUint32(b[0:], proverRank)
	binary.LittleEndian.PutUint32(b[4:], verifierRank)
	binary.LittleEndian.PutUint32(b[8:], worldSize)
	binary.LittleEndian.PutUint32(b[12:], conn)
	m.Write(b[:])
	var out [MACBytes]byte
	m.Sum(out[:0])
	return out
}

// EqualMAC compares two proofs in constant time.
func EqualMAC(a, b [MACBytes]byte) bool { return hmac.Equal(a[:], b[:]) }
