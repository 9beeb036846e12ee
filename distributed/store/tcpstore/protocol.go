package tcpstore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Wire format (all integers big-endian):
//
//	frame    = length:u32 payload[length]          length <= the frame limit, checked before allocation
//	request  = op:u8 id:u64 body
//	response = op:u8 id:u64 status:u8 body
//	str      = n:u32 bytes[n]                       n <= bytes left in the payload
//
// Request bodies by op:
//
//	set     key:str value:str
//	get     key:str
//	add     key:str delta:i64
//	cas     key:str hasExpected:u8 [expected:str] desired:str
//	wait    count:u32 key:str…
//	delete  key:str
//	check   count:u32 key:str…                      non-blocking: which keys are missing
//	cancel  (empty)                                 abandons the blocking request with this id
//
// Response bodies when status is statusOK:
//
//	set, wait   (empty)
//	get         value:str
//	add         value:i64
//	cas         present:u8 [value:str]
//	delete      existed:u8
//	check       count:u32 key:str…                  the keys not set
//
// statusError carries message:str; statusClosed is empty. A response with
// op opGoodbye and id 0 is sent unprompted when the server shuts down.
// Every decoder rejects trailing bytes.

const (
	opSet     byte = 1
	opGet     byte = 2
	opAdd     byte = 3
	opCAS     byte = 4
	opWait    byte = 5
	opDelete  byte = 6
	opCheck   byte = 7
	opCancel  byte = 8
	opGoodbye byte = 9
)

const (
	statusOK     byte = 0
	statusError  byte = 1
	statusClosed byte = 2
)

// DefaultMaxFrameBytes bounds one message when Options.MaxFrameBytes is 0:
// values up to 64 MiB plus room for the key and header.
const DefaultMaxFrameBytes = 64<<20 + 64<<10

// frameHeaderBytes is the length prefix.
const frameHeaderBytes = 4

// ErrFrameTooLarge is wrapped by errors about a frame whose declared
// length exceeds the limit; nothing is allocated for such a frame.
var ErrFrameTooLarge = errors.New("tcpstore: frame too large")

// errMalformed is wrapped by decoding errors.
var errMalformed = errors.New("malformed message")

func opName(op byte) string {
	switch op {
	case opSet:
		return "set"
	case opGet:
		return "get"
	case opAdd:
		return "add"
	case opCAS:
		return "compare-and-swap"
	case opWait:
		return "wait"
	case opDelete:
		return "delete"
	case opCheck:
		return "check"
	case opCancel:
		return "cancel"
	case opGoodbye:
		return "goodbye"
	}
	return fmt.Sprintf("op %d", op)
}

// request is one decoded client request.
type request struct {
	op          byte
	id          uint64
	key         string
	keys        []string // wait, check
	value       []byte   // set: value; cas: desired
	expected    []byte   // cas; meaningful only if hasExpected
	hasExpected bool
	delta       int64
}

// response is one decoded server reply.
type response struct {
	op      byte
	id      uint64
	status  byte
	value   []byte // get; cas when present
	present bool   // cas
	n       int64  // add
	existed bool   // delete
	keys    []string
	msg     string // statusError
}

// readFrame reads one frame, refusing (before allocating) any whose length
// exceeds limit.
func readFrame(r io.Reader, limit int64) ([]byte, error) {
	var hdr [frameHeaderBytes]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	n := int64(binary.BigEndian.Uint32(hdr[:]))
	if n > limit {
		return nil, fmt.Errorf("%w: %d bytes declared, limit %d", ErrFrameTooLarge, n, limit)
	}
	buf := make([]byte, n)
	if _, err := io.ReadFull(r, buf); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	return buf, nil
}

// appendFrameHeader reserves the length prefix; finishFrame fills it in.
func appendFrameHeader(b []byte) []byte { return append(b, 0, 0, 0, 0) }

func finishFrame(b []byte) []byte {
	binary.BigEndian.PutUint32(b, uint32(len(b)-frameHeaderBytes))
	return b
}

func appendStr(b []byte, s []byte) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(len(s)))
	return append(b, s...)
}

func appendKeys(b []byte, keys []string) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(len(keys)))
	for _, k := range keys {
		b = appendStr(b, []byte(k))
	}
	return b
}

func appendBool(b []byte, v bool) []byte {
	if v {
		return append(b, 1)
	}
	return append(b, 0)
}

// encodeRequest returns req as a complete frame.
func encodeRequest(req *request) []byte {
	b := appendFrameHeader(make([]byte, 0, 32+len(req.key)+len(req.value)+len(req.expected)))
	b = append(b, req.op)
	b = binary.BigEndian.AppendUint64(b, req.id)
	switch req.op {
	case opSet:
		b = appendStr(b, []byte(req.key))
		b = appendStr(b, req.value)
	case opGet, opDelete:
		b = appendStr(b, []byte(req.key))
	case opAdd:
		b = appendStr(b, []byte(req.key))
		b = binary.BigEndian.AppendUint64(b, uint64(req.delta))
	case opCAS:
		b = appendStr(b, []byte(req.key))
		b = appendBool(b, req.hasExpected)
		if req.hasExpected {
			b = appendStr(b, req.expected)
		}
		b = appendStr(b, req.value)
	case opWait, opCheck:
		b = appendKeys(b, req.keys)
	case opCancel:
	}
	return finishFrame(b)
}

// encodeResponse returns resp as a complete frame.
func encodeResponse(resp *response) []byte {
	b := appendFrameHeader(make([]byte, 0, 32+len(resp.value)+len(resp.msg)))
	b = append(b, resp.op)
	b = binary.BigEndian.AppendUint64(b, resp.id)
	b = append(b, resp.status)
	switch resp.status {
	case statusError:
		return finishFrame(appendStr(b, []byte(resp.msg)))
	case statusClosed:
		return finishFrame(b)
	}
	switch resp.op {
	case opGet:
		b = appendStr(b, resp.value)
	case opAdd:
		b = binary.BigEndian.AppendUint64(b, uint64(resp.n))
	case opCAS:
		b = appendBool(b, resp.present)
		if resp.present {
			b = appendStr(b, resp.value)
		}
	case opDelete:
		b = appendBool(b, resp.existed)
	case opCheck:
		b = appendKeys(b, resp.keys)
	}
	return finishFrame(b)
}

// decoder reads fields from a payload; the first failure sticks.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: "+format, append([]any{errMalformed}, args...)...)
	}
}

// take returns the next n bytes, or nil when fewer are left (failing d)
// or d has already failed.
func (d *decoder) take(n int, what string) []byte {
	if d.err != nil {
		return nil
	}
	if len(d.b) < n {
		d.fail("%s: truncated", what)
		return nil
	}
	v := d.b[:n]
	d.b = d.b[n:]
	return v
}

func (d *decoder) u8(what string) byte {
	if v := d.take(1, what); v != nil {
		return v[0]
	}
	return 0
}

func (d *decoder) u32(what string) uint32 {
	if v := d.take(4, what); v != nil {
		return binary.BigEndian.Uint32(v)
	}
	return 0
}

func (d *decoder) u64(what string) uint64 {
	if v := d.take(8, what); v != nil {
		return binary.BigEndian.Uint64(v)
	}
	return 0
}

func (d *decoder) bool(what string) bool {
	switch v := d.u8(what); v {
	case 0:
		return false
	case 1:
		return true
	default:
		d.fail("%s: flag %d is neither 0 nor 1", what, v)
		return false
	}
}

// str returns a copy of a length-prefixed byte string. The length is
// checked against the bytes left before anything is allocated.
func (d *decoder) str(what string) []byte {
	n := d.u32(what + " length")
	if d.err != nil {
		return nil
	}
	if uint64(n) > uint64(len(d.b)) {
		d.fail("%s: length %d exceeds the %d bytes left", what, n, len(d.b))
		return nil
	}
	v := make([]byte, n)
	copy(v, d.b[:n])
	d.b = d.b[n:]
	return v
}

// keys decodes a counted key list; the count is checked against the bytes
// left (each key needs at least 4) before the slice is allocated.
func (d *decoder) keys(what string) []string {
	n := d.u32(what + " count")
	if d.err != nil {
		return nil
	}
	if uint64(n)*4 > uint64(len(d.b)) {
		d.fail("%s: %d keys cannot fit in the %d bytes left", what, n, len(d.b))
		return nil
	}
	keys := make([]string, 0, n)
	for range n {
		k := d.str(what)
		if d.err != nil {
			return nil
		}
		keys = append(keys, string(k))
	}
	return keys
}

// end fails d if bytes are left, and returns its failure wrapped with
// the message's op and id ("get request 7: …"); what is "request" or
// "response".
func (d *decoder) end(what string, op byte, id uint64) error {
	if d.err == nil && len(d.b) != 0 {
		d.fail("%d trailing bytes", len(d.b))
	}
	if d.err != nil {
		return fmt.Errorf("%s %s %d: %w", opName(op), what, id, d.err)
	}
	return nil
}

// decoded returns m, or nil and err when decoding it failed.
func decoded[M any](m *M, err error) (*M, error) {
	if err != nil {
		return nil, err
	}
	return m, nil
}

// decodeRequest parses a request payload (a frame without its length).
func decodeRequest(p []byte) (*request, error) {
	d := decoder{b: p}
	req := &request{op: d.u8("op"), id: d.u64("request id")}
	if d.err != nil {
		return nil, d.err
	}
	switch req.op {
	case opSet:
		req.key = string(d.str("key"))
		req.value = d.str("value")
	case opGet, opDelete:
		req.key = string(d.str("key"))
	case opAdd:
		req.key = string(d.str("key"))
		req.delta = int64(d.u64("delta"))
	case opCAS:
		req.key = string(d.str("key"))
		req.hasExpected = d.bool("expected flag")
		if req.hasExpected {
			req.expected = d.str("expected")
		}
		req.value = d.str("desired")
	case opWait, opCheck:
		req.keys = d.keys("keys")
	case opCancel:
	default:
		d.fail("unknown request op %d", req.op)
	}
	return decoded(req, d.end("request", req.op, req.id))
}

// decodeResponse parses a response payload.
func decodeResponse(p []byte) (*response, error) {
	d := decoder{b: p}
	resp := &response{op: d.u8("op"), id: d.u64("request id"), status: d.u8("status")}
	if d.err != nil {
		return nil, d.err
	}
	switch resp.status {
	case statusOK:
		switch resp.op {
		case opSet, opWait:
		case opGet:
			resp.value = d.str("value")
		case opAdd:
			resp.n = int64(d.u64("value"))
		case opCAS:
			resp.present = d.bool("present flag")
			if resp.present {
				resp.value = d.str("value")
			}
		case opDelete:
			resp.existed = d.bool("existed flag")
		case opCheck:
			resp.keys = d.keys("missing keys")
		default:
			d.fail("unknown response op %d", resp.op)
		}
	case statusError:
		resp.msg = string(d.str("error message"))
	case statusClosed:
	default:
		d.fail("unknown status %d", resp.status)
	}
	return decoded(resp, d.end("response", resp.op, resp.id))
}
