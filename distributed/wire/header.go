package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// HeaderBytes is the size of an encoded Header.
const HeaderBytes = 32

// Magic opens every frame.
const Magic uint16 = 0x47C0 // bytes C0 47 on the wire

// Version is the frame format version this package speaks.
const Version = 1

// DefaultMaxLength is the payload limit callers use when they have no
// better bound: 64 MiB.
const DefaultMaxLength = 64 << 20

// Kind says what a frame carries.
type Kind uint8

const (
	// KindHello opens a connection: the dialer introduces itself.
	// Payload: Hello.
	KindHello Kind = 1 + iota
	// KindWelcome answers a Hello: the acceptor introduces itself and
	// proves it holds the token. Payload: Hello.
	KindWelcome
	// KindAuth completes the handshake: the dialer proves it holds the
	// token. Payload: Hello.
	KindAuth
	// KindReady tells the dialer the acceptor accepted it. No payload.
	KindReady
	// KindRefuse ends a handshake: the payload is the reason, UTF-8 text
	// of at most MaxReasonBytes.
	KindRefuse
	// KindData starts a message under the header's tag; aux is the
	// message's total length, at least length. When aux > length the
	// rest follows in KindMore frames.
	KindData
	// KindMore continues the message in progress on the connection; aux
	// is the offset of its payload within the message.
	KindMore
	// KindCancel abandons the message in progress under the header's tag.
	// No payload.
	KindCancel
	// KindClose says the sender sends nothing more. No payload.
	KindClose
	// KindCloseAck acknowledges KindClose: every frame before the Close
	// was received. No payload.
	KindCloseAck

	maxKind = KindCloseAck
)

var kindNames = [...]string{
	KindHello:    "hello",
	KindWelcome:  "welcome",
	KindAuth:     "auth",
	KindReady:    "ready",
	KindRefuse:   "refuse",
	KindData:     "data",
	KindMore:     "more",
	KindCancel:   "cancel",
	KindClose:    "close",
	KindCloseAck: "close-ack",
}

func (k Kind) String() string {
	if k >= 1 && k <= maxKind {
		return kindNames[k]
	}
	return fmt.Sprintf("kind %d", uint8(k))
}

// Header is a decoded frame header.
type Header struct {
	Kind   Kind
	Length uint32 // payload bytes following the header
	Group  uint32
	Step   uint32
	Seq    uint64
	Aux    uint64
}

var (
	// ErrMagic is wrapped by the error for bytes that are not a cohort frame.
	ErrMagic = errors.New("wire: not a cohort frame")
	// ErrVersion is wrapped by the error for a frame of another version.
	ErrVersion = errors.New("wire: unsupported version")
	// ErrKind is wrapped by the error for an unknown frame kind.
	ErrKind = errors.New("wire: unknown frame kind")
	// ErrTooLarge is wrapped by the error for a length over the limit.
	ErrTooLarge = errors.New("wire: frame too large")
	// ErrShort is wrapped by the error for a header given fewer than
	// HeaderBytes bytes.
	ErrShort = errors.New("wire: short header")
)

// Put encodes h into b[:HeaderBytes]. It panics if b is shorter.
func (h Header) Put(b []byte) {
	if len(b) < HeaderBytes {
		panic(fmt.Sprintf("wire: Header.Put: buffer of %d bytes, need %d", len(b), HeaderBytes))
	}
	_ = b[HeaderBytes-1]
	binary.LittleEndian.PutUint16(b[0:], Magic)
	b[2] = Version
	b[3] = byte(h.Kind)
	binary.LittleEndian.PutUint32(b[4:], h.Length)
	binary.LittleEndian.PutUint32(b[8:], h.Group)
	binary.LittleEndian.PutUint32(b[12:], h.Step)
	binary.LittleEndian.PutUint64(b[16:], h.Seq)
	binary.LittleEndian.PutUint64(b[24:], h.Aux)
}

// Append appends the encoding of h to dst.
func (h Header) Append(dst []byte) []byte {
	var b [HeaderBytes]byte
	h.Put(b[:])
	return append(dst, b[:]...)
}

// DecodeHeader decodes the header at the start of b, checking magic,
// version and kind, and that the payload length is at most maxLength.
func DecodeHeader(b []byte, maxLength uint32) (Header, error) {
	if len(b) < HeaderBytes {
		return Header{}, fmt.Errorf("%w: %d bytes, need %d", ErrShort, len(b), HeaderBytes)
	}
	_ = b[HeaderBytes-1]
	if m := binary.LittleEndian.Uint16(b[0:]); m != Magic {
		return Header{}, fmt.Errorf("%w (magic %#04x)", ErrMagic, m)
	}
	if v := b[2]; v != Version {
		return Header{}, fmt.Errorf("%w %d (this end speaks %d)", ErrVersion, v, Version)
	}
	h := Header{
		Kind:   Kind(b[3]),
		Length: binary.LittleEndian.Uint32(b[4:]),
		Group:  binary.LittleEndian.Uint32(b[8:]),
		Step:   binary.LittleEndian.Uint32(b[12:]),
		Seq:    binary.LittleEndian.Uint64(b[16:]),
		Aux:    binary.LittleEndian.Uint64(b[24:]),
	}
	if h.Kind < 1 || h.Kind > maxKind {
		return Header{}, fmt.Errorf("%w %d", ErrKind, uint8(h.Kind))
	}
	if h.Length > maxLength {
		return Header{}, &LengthError{Length: uint64(h.Length), Limit: uint64(maxLength)}
	}
	return h, nil
}

// LengthError reports a length over its limit; it wraps ErrTooLarge.
type LengthError struct {
	What   string // "frame" when empty
	Length uint64
	Limit  uint64
}

func (e *LengthError) Error() string {
	what := e.What
	if what == "" {
		what = "frame"
	}
	return fmt.Sprintf("wire: %s length %d exceeds limit %d", what, e.Length, e.Limit)
}

func (e *LengthError) Unwrap() error { return ErrTooLarge }

// ReadHeader reads and decodes one header from r into scratch, which must
// hold HeaderBytes bytes.
func ReadHeader(r io.Reader, scratch []byte, maxLength uint32) (Header, error) {
	if _, err := io.ReadFull(r, scratch[:HeaderBytes]); err != nil {
		return Header{}, err
	}
	return DecodeHeader(scratch, maxLength)
}

// WriteFrame writes h, with h.Length set to len(payload), and payload to w
// in one Write call.
func WriteFrame(w io.Writer, h Header, payload []byte) error {
	if uint64(len(payload)) > 1<<32-1 {
		return &LengthError{Length: uint64(len(payload)), Limit: 1<<32 - 1}
	}
	h.Length = uint32(len(payload))
	b := make([]byte, HeaderBytes+len(payload))
	h.Put(b)
	copy(b[HeaderBytes:], payload)
	_, err := w.Write(b)
	return err
}

// ReadFrame reads one frame from r: its header, checked against
// maxLength, then its payload.
func ReadFrame(r io.Reader, maxLength uint32) (Header, []byte, error) {
	var hb [HeaderBytes]byte
	h, err := ReadHeader(r, hb[:], maxLength)
	if err != nil {
		return Header{}, nil, err
	}
	p := make([]byte, h.Length)
	if _, err := io.ReadFull(r, p); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return Header{}, nil, fmt.Errorf("wire: reading %d-byte %v payload: %w", h.Length, h.Kind, err)
	}
	return h, p, nil
}
