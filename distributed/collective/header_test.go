package collective

import (
	"bytes"
	"testing"
)

func TestHeaderRoundTrip(t *testing.T) {
	for _, c := range []Call{
		{Kind: AllReduce, DType: BFloat16, Op: Prod, Count: 1<<40 + 3},
		{Kind: Broadcast, DType: Int64, Count: 0, Root: 7},
		{Kind: Recv, DType: Float32, Count: 5, Tag: 1<<31 - 1},
		{Kind: Agree, Count: 3, Root: -123456},
	} {
		h := header{group: 0xdeadbeef, rank: 3, seq: 1<<63 | 42, call: c}
		var p [headerLen]byte
		h.encode(p[:])
		got, err := decodeHeader(p[:])
		c.Peer = 0 // not carried
		if err != nil || got.group != h.group || got.rank != h.rank || got.seq != h.seq || got.call != c {
			t.Errorf("round trip of %+v: %+v, %v", h, got, err)
		}
	}
}

// FuzzDecodeHeader: any bytes either decode to a header that re-encodes to
// the same bytes (modulo the reserved byte) or fail cleanly.
func FuzzDecodeHeader(f *testing.F) {
	var p [headerLen]byte
	(&header{group: 1, rank: 2, seq: 3, call: Call{Kind: AllReduce, Count: 10}}).encode(p[:])
	f.Add(p[:])
	f.Add([]byte{})
	f.Add(bytes.Repeat([]byte{0xff}, headerLen))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := decodeHeader(b)
		if err != nil {
			return
		}
		var q [headerLen]byte
		h.encode(q[:])
		b2 := append([]byte(nil), b...)
		b2[7] = 0
		if !bytes.Equal(q[:], b2) {
			t.Fatalf("decode/encode changed % x into % x", b, q)
		}
		_ = h.call.String()
		_ = matches(h.call, h.call)
	})
}
