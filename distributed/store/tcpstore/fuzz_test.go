package tcpstore

import (
	"bytes"
	"errors"
	"reflect"
	"testing"
)

func seedRequests() []*request {
	return []*request{
		{op: opSet, id: 1, key: "k", value: []byte("v")},
		{op: opGet, id: 2, key: "addr/rank/3"},
		{op: opAdd, id: 3, key: "n", delta: -5},
		{op: opCAS, id: 4, key: "c", hasExpected: true, expected: []byte("a"), value: []byte("b")},
		{op: opCAS, id: 5, key: "c", value: []byte{}},
		{op: opWait, id: 6, keys: []string{"a", "b", ""}},
		{op: opDelete, id: 7, key: "d"},
		{op: opCheck, id: 8, keys: []string{"x"}},
		{op: opCancel, id: 9},
	}
}

func seedResponses() []*response {
	return []*response{
		{op: opSet, id: 1},
		{op: opGet, id: 2, value: []byte("10.0.0.1:1234")},
		{op: opAdd, id: 3, n: -5},
		{op: opCAS, id: 4, present: true, value: []byte("b")},
		{op: opCAS, id: 5},
		{op: opWait, id: 6},
		{op: opDelete, id: 7, existed: true},
		{op: opCheck, id: 8, keys: []string{"x", "y"}},
		{op: opGet, id: 9, status: statusError, msg: "boom"},
		{op: opGoodbye, status: statusClosed},
	}
}

// FuzzDecodeRequest feeds arbitrary payloads to the server's decoder: it
// must never panic, never allocate beyond the payload's size, and every
// payload it accepts must re-encode to the same bytes.
func FuzzDecodeRequest(f *testing.F) {
	fuzzReencode(f, seedRequests(), encodeRequest, decodeRequest,
		[]byte{opWait, 0, 0, 0, 0, 0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff},
		[]byte{opSet, 0, 0, 0, 0, 0, 0, 0, 1, 0x7f, 0xff, 0xff, 0xff})
}

// FuzzDecodeResponse does the same for the client's decoder.
func FuzzDecodeResponse(f *testing.F) {
	fuzzReencode(f, seedResponses(), encodeResponse, decodeResponse,
		[]byte{opCheck, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0xff, 0xff, 0xff, 0xff})
}

// fuzzReencode fuzzes decode, seeded with the payloads of the encoded
// seeds and with extra: a payload it refuses must be refused with
// errMalformed, one it accepts must re-encode to the same bytes.
func fuzzReencode[M any](f *testing.F, seeds []*M, encode func(*M) []byte, decode func([]byte) (*M, error), extra ...[]byte) {
	for _, m := range seeds {
		f.Add(encode(m)[frameHeaderBytes:])
	}
	for _, p := range extra {
		f.Add(p)
	}
	f.Fuzz(func(t *testing.T, p []byte) {
		m, err := decode(p)
		if err != nil {
			if !errors.Is(err, errMalformed) {
				t.Fatalf("decode error %v does not wrap errMalformed", err)
			}
			return
		}
		again := encode(m)[frameHeaderBytes:]
		if !bytes.Equal(again, p) {
			t.Fatalf("re-encoding changed the payload:\n in  %x\n out %x", p, again)
		}
	})
}

// FuzzReadFrame checks the frame reader against arbitrary streams: it
// returns a payload no longer than the limit, or an error.
func FuzzReadFrame(f *testing.F) {
	f.Add([]byte{0, 0, 0, 3, 'a', 'b', 'c'})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{0, 0, 1})
	f.Fuzz(func(t *testing.T, stream []byte) {
		const limit = 64
		p, err := readFrame(bytes.NewReader(stream), limit)
		if err != nil {
			return
		}
		if len(p) > limit || len(p)+frameHeaderBytes > len(stream) {
			t.Fatalf("readFrame returned %d bytes from a %d-byte stream with limit %d", len(p), len(stream), limit)
		}
	})
}

// FuzzHandshakeDecoders covers the two messages parsed before
// authentication, the ones any peer can send.
func FuzzHandshakeDecoders(f *testing.F) {
	f.Add(encodeHello(make([]byte, nonceBytes)))
	f.Add(encodeClientReply(clientReply{hasToken: true, clientNonce: make([]byte, nonceBytes), mac: make([]byte, macBytes)}))
	f.Fuzz(func(t *testing.T, p []byte) {
		if n, err := decodeHello(p); err == nil && len(n) != nonceBytes {
			t.Fatalf("decodeHello accepted a %d-byte nonce", len(n))
		}
		if r, err := decodeClientReply(p); err == nil {
			if len(r.clientNonce) != nonceBytes || len(r.mac) != macBytes {
				t.Fatalf("decodeClientReply accepted nonce %d bytes, mac %d bytes", len(r.clientNonce), len(r.mac))
			}
			if !bytes.Equal(encodeClientReply(r), p) {
				t.Fatal("client reply does not re-encode to the same bytes")
			}
		}
	})
}

func TestRoundTrip(t *testing.T) {
	roundTrip(t, "request/", seedRequests(), func(r *request) byte { return r.op }, encodeRequest, decodeRequest, normReq)
	roundTrip(t, "response/", seedResponses(), func(r *response) byte { return r.op }, encodeResponse, decodeResponse, normResp)
}

// roundTrip checks that each seed decodes from its encoding to itself
// (after norm), in a subtest named prefix and the seed's op.
func roundTrip[M, N any](t *testing.T, prefix string, seeds []*M, op func(*M) byte, encode func(*M) []byte, decode func([]byte) (*M, error), norm func(*M) N) {
	for _, r := range seeds {
		t.Run(prefix+opName(op(r)), func(t *testing.T) {
			got, err := decode(encode(r)[frameHeaderBytes:])
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(norm(got), norm(r)) {
				t.Fatalf("round trip: got %+v, want %+v", got, r)
			}
		})
	}
}

// normReq and normResp make nil and empty slices compare equal.
func normReq(r *request) request {
	c := *r
	if len(c.value) == 0 {
		c.value = nil
	}
	if len(c.expected) == 0 {
		c.expected = nil
	}
	return c
}

func normResp(r *response) response {
	c := *r
	if len(c.value) == 0 {
		c.value = nil
	}
	return c
}

// TestFrameLimitBeforeAllocation checks that a frame declaring 4 GiB is
// refused without allocating for it.
func TestFrameLimitBeforeAllocation(t *testing.T) {
	stream := []byte{0xff, 0xff, 0xff, 0xff}
	allocs := testing.AllocsPerRun(100, func() {
		_, err := readFrame(bytes.NewReader(stream), DefaultMaxFrameBytes)
		if !errors.Is(err, ErrFrameTooLarge) {
			t.Fatalf("readFrame = %v; want ErrFrameTooLarge", err)
		}
	})
	// The reader and the error message allocate a little; a 4 GiB buffer
	// would be one allocation too, so also bound the bytes.
	var before, after runtimeMem
	before.read()
	readFrame(bytes.NewReader(stream), DefaultMaxFrameBytes)
	after.read()
	if grew := after.total - before.total; grew > 1<<20 {
		t.Fatalf("refusing a 4 GiB frame allocated %d bytes", grew)
	}
	if allocs > 10 {
		t.Fatalf("refusing an oversized frame took %v allocations", allocs)
	}
}
