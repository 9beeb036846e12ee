package wire

import (
	"bytes"
	"errors"
	"testing"
)

// FuzzDecodeHeader: decoding never panics, accepts only headers within the
// limit, and a decoded header re-encodes to the same bytes.
func FuzzDecodeHeader(f *testing.F) {
	f.Add(Header{Kind: KindData, Length: 4096, Group: 1, Seq: 2, Step: 3, Aux: 4096}.Append(nil), uint32(1<<20))
	f.Add(Header{Kind: KindMore, Length: 1 << 20, Aux: 1 << 20}.Append(nil), uint32(1<<20))
	f.Add(Header{Kind: KindClose}.Append(nil), uint32(0))
	f.Add([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n......"), uint32(1<<20))
	f.Add(bytes.Repeat([]byte{0xFF}, 32), uint32(64<<20))
	f.Add([]byte{0xC0, 0x47, 1, 6}, uint32(100))
	f.Fuzz(func(t *testing.T, b []byte, limit uint32) {
		h, err := DecodeHeader(b, limit)
		if err != nil {
			if !errors.Is(err, ErrShort) && !errors.Is(err, ErrMagic) && !errors.Is(err, ErrVersion) &&
				!errors.Is(err, ErrKind) && !errors.Is(err, ErrTooLarge) {
				t.Fatalf("error %v wraps no sentinel", err)
			}
			return
		}
		if h.Length > limit {
			t.Fatalf("accepted length %d over limit %d", h.Length, limit)
		}
		if got := h.Append(nil); !bytes.Equal(got, b[:HeaderBytes]) {
			t.Fatalf("re-encoded %x, input %x", got, b[:HeaderBytes])
		}
	})
}

// FuzzReadFrame: a stream of arbitrary bytes yields frames within the limit
// or an error, never a panic or a payload over the limit.
func FuzzReadFrame(f *testing.F) {
	var seed []byte
	seed = Header{Kind: KindData, Length: 3, Aux: 3}.Append(seed)
	seed = append(seed, "abc"...)
	seed = Header{Kind: KindClose}.Append(seed)
	f.Add(seed, uint32(16))
	f.Add(Header{Kind: KindData, Length: 1<<32 - 1}.Append(nil), uint32(1<<10))
	f.Fuzz(func(t *testing.T, b []byte, limit uint32) {
		limit %= 1 << 16 // keep the fuzzer's allocations small
		r := bytes.NewReader(b)
		for {
			h, p, err := ReadFrame(r, limit)
			if err != nil {
				return
			}
			if uint32(len(p)) != h.Length || h.Length > limit {
				t.Fatalf("frame %+v with %d-byte payload, limit %d", h, len(p), limit)
			}
		}
	})
}

// FuzzDecodeHello: handshake payloads decode only at their exact size and
// re-encode to the same bytes.
func FuzzDecodeHello(f *testing.F) {
	h := Hello{Rank: 1, WorldSize: 2, Peer: 0, Conn: 0}
	f.Add(h.Append(nil))
	f.Add([]byte{})
	f.Add(make([]byte, HelloBytes+1))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := DecodeHello(b)
		if err != nil {
			if len(b) == HelloBytes {
				t.Fatalf("rejected a %d-byte payload: %v", len(b), err)
			}
			return
		}
		if got := h.Append(nil); !bytes.Equal(got, b) {
			t.Fatalf("re-encoded %x, input %x", got, b)
		}
	})
}
