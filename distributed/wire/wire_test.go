package wire

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
)

func TestHeaderRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		h    Header
	}{
		{"data", Header{Kind: KindData, Length: 4096, Group: 1, Step: 2, Seq: 3, Aux: 4096}},
		{"more-max-fields", Header{Kind: KindMore, Length: 1 << 20, Group: ^uint32(0), Step: ^uint32(0), Seq: ^uint64(0), Aux: 1<<40 + 7}},
		{"close-empty", Header{Kind: KindClose}},
		{"hello", Header{Kind: KindHello, Length: HelloBytes}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := tc.h.Append(nil)
			if len(b) != HeaderBytes {
				t.Fatalf("encoded %d bytes, want %d", len(b), HeaderBytes)
			}
			if b[0] != 0xC0 || b[1] != 0x47 {
				t.Fatalf("magic bytes %#x %#x", b[0], b[1])
			}
			got, err := DecodeHeader(b, 1<<20)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.h {
				t.Fatalf("decoded %+v, want %+v", got, tc.h)
			}
		})
	}
}

func TestDecodeHeaderErrors(t *testing.T) {
	valid := Header{Kind: KindData, Length: 10, Aux: 10}.Append(nil)
	mutate := func(f func(b []byte)) []byte {
		b := bytes.Clone(valid)
		f(b)
		return b
	}
	tests := []struct {
		name    string
		b       []byte
		limit   uint32
		wantErr error
		wantMsg string
	}{
		{"short", valid[:31], 100, ErrShort, "wire: short header: 31 bytes, need 32"},
		{"empty", nil, 100, ErrShort, "wire: short header: 0 bytes, need 32"},
		{"magic", mutate(func(b []byte) { b[0] = 'G' }), 100, ErrMagic, "wire: not a cohort frame (magic 0x4747)"},
		{"version", mutate(func(b []byte) { b[2] = 9 }), 100, ErrVersion, "wire: unsupported version 9 (this end speaks 1)"},
		{"kind-zero", mutate(func(b []byte) { b[3] = 0 }), 100, ErrKind, "wire: unknown frame kind 0"},
		{"kind-high", mutate(func(b []byte) { b[3] = 200 }), 100, ErrKind, "wire: unknown frame kind 200"},
		{"too-large", mutate(func(b []byte) { b[4], b[5], b[6], b[7] = 0xFF, 0xFF, 0xFF, 0xFF }), 64 << 20, ErrTooLarge,
			"wire: frame length 4294967295 exceeds limit 67108864"},
		{"over-limit-by-one", valid, 9, ErrTooLarge, "wire: frame length 10 exceeds limit 9"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodeHeader(tc.b, tc.limit)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("error %v, want one wrapping %v", err, tc.wantErr)
			}
			if err.Error() != tc.wantMsg {
				t.Fatalf("message %q, want %q", err, tc.wantMsg)
			}
		})
	}
	t.Run("at-limit", func(t *testing.T) {
		if _, err := DecodeHeader(valid, 10); err != nil {
			t.Fatalf("length equal to the limit rejected: %v", err)
		}
	})
}

func TestPutPanicsOnShortBuffer(t *testing.T) {
	defer func() {
		r := recover()
		if r == nil || !strings.HasPrefix(r.(string), "wire: Header.Put") {
			t.Fatalf("recovered %v", r)
		}
	}()
	Header{}.Put(make([]byte, 31))
}

func TestFrameRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	payload := []byte("payload bytes")
	if err := WriteFrame(&buf, Header{Kind: KindRefuse, Seq: 5}, payload); err != nil {
		t.Fatal(err)
	}
	if err := WriteFrame(&buf, Header{Kind: KindReady}, nil); err != nil {
		t.Fatal(err)
	}
	h, p, err := ReadFrame(&buf, 100)
	if err != nil || h.Kind != KindRefuse || h.Seq != 5 || !bytes.Equal(p, payload) {
		t.Fatalf("first frame: %+v %q %v", h, p, err)
	}
	h, p, err = ReadFrame(&buf, 100)
	if err != nil || h.Kind != KindReady || len(p) != 0 {
		t.Fatalf("second frame: %+v %q %v", h, p, err)
	}
	if _, _, err := ReadFrame(&buf, 100); err != io.EOF {
		t.Fatalf("at end: %v, want io.EOF", err)
	}
}

func TestReadFrameTruncated(t *testing.T) {
	b := Header{Kind: KindData, Length: 10, Aux: 10}.Append(nil)
	b = append(b, "abc"...)
	_, _, err := ReadFrame(bytes.NewReader(b), 100)
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("got %v, want io.ErrUnexpectedEOF", err)
	}
}

func TestReadFrameOversizedAllocatesNothingLarge(t *testing.T) {
	b := Header{Kind: KindData, Length: 1<<32 - 1}.Append(nil)
	allocs := testing.AllocsPerRun(10, func() {
		if _, _, err := ReadFrame(bytes.NewReader(b), 1<<20); !errors.Is(err, ErrTooLarge) {
			t.Fatalf("got %v", err)
		}
	})
	// The reader and the error; nothing sized by the header.
	if allocs > 4 {
		t.Fatalf("%v allocations for a rejected frame", allocs)
	}
}

func TestHelloRoundTrip(t *testing.T) {
	h := Hello{Rank: 3, WorldSize: 8, Peer: 1, Conn: 2}
	for i := range h.Nonce {
		h.Nonce[i] = byte(i)
		h.MAC[i] = byte(255 - i)
	}
	b := h.Append(nil)
	if len(b) != HelloBytes {
		t.Fatalf("encoded %d bytes, want %d", len(b), HelloBytes)
	}
	got, err := DecodeHello(b)
	if err != nil || got != h {
		t.Fatalf("decoded %+v, %v", got, err)
	}
	for _, n := range []int{0, HelloBytes - 1, HelloBytes + 1} {
		if _, err := DecodeHello(make([]byte, n)); !errors.Is(err, ErrHello) {
			t.Errorf("%d-byte payload: %v, want ErrHello", n, err)
		}
	}
}

func TestMAC(t *testing.T) {
	var n1, n2 [NonceBytes]byte
	n1[0], n2[0] = 1, 2
	base := MAC([]byte("secret"), "label", &n1, &n2, 1, 0, 2, 0)
	tests := []struct {
		name string
		mac  [MACBytes]byte
	}{
		{"token", MAC([]byte("other"), "label", &n1, &n2, 1, 0, 2, 0)},
		{"label", MAC([]byte("secret"), "label2", &n1, &n2, 1, 0, 2, 0)},
		{"nonces-swapped", MAC([]byte("secret"), "label", &n2, &n1, 1, 0, 2, 0)},
		{"prover", MAC([]byte("secret"), "label", &n1, &n2, 2, 0, 2, 0)},
		{"verifier", MAC([]byte("secret"), "label", &n1, &n2, 1, 1, 2, 0)},
		{"world", MAC([]byte("secret"), "label", &n1, &n2, 1, 0, 3, 0)},
		{"conn", MAC([]byte("secret"), "label", &n1, &n2, 1, 0, 2, 1)},
	}
	if !EqualMAC(base, MAC([]byte("secret"), "label", &n1, &n2, 1, 0, 2, 0)) {
		t.Fatal("MAC is not deterministic")
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if EqualMAC(base, tc.mac) {
				t.Fatalf("changing the %s does not change the MAC", tc.name)
			}
		})
	}
}

func TestKindString(t *testing.T) {
	if KindCloseAck.String() != "close-ack" || Kind(0).String() != "kind 0" || Kind(99).String() != "kind 99" {
		t.Fatal(KindCloseAck.String(), Kind(0).String(), Kind(99).String())
	}
}
