package tcpstore

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
)

// Authentication is a challenge–response over HMAC-SHA256 keyed with the
// shared token, run before any command:
//
//	server → client  helloMagic version:u8 serverNonce[32]
//	client → server  replyMagic version:u8 hasToken:u8 clientNonce[32] mac[32]
//	                 mac = HMAC(token, "cohort-store/1 client" ‖ serverNonce ‖ clientNonce)
//	server → client  0 HMAC(token, "cohort-store/1 server" ‖ serverNonce ‖ clientNonce)   accepted
//	                 1 reason                                                            refused
//
// Both sides prove knowledge of the token without sending it; fresh nonces
// on both sides defeat replay. The client also checks the server's proof,
// so a client never sends keys or values to a server without the token.
// Each handshake message travels in a frame of at most handshakeMaxBytes.

const (
	protocolVersion   = 1
	nonceBytes        = 32
	macBytes          = sha256.Size
	handshakeMaxBytes = 256
)

var (
	helloMagic = []byte("COHORT-STORE")
	replyMagic = []byte("COHORT-CLIENT")
)

const (
	clientLabel = "cohort-store/1 client"
	serverLabel = "cohort-store/1 server"
)

// ErrAuth is wrapped by errors from a failed authentication: the server
// refused the client's token, or the server could not prove it holds the
// client's token.
var ErrAuth = errors.New("tcpstore: authentication failed")

// errEvicted ends a handshake whose connection the admission gate closed
// before the server accepted it.
var errEvicted = errors.New("connection closed before the acceptance")

func mac(token, label string, serverNonce, clientNonce []byte) []byte {
	h := hmac.New(sha256.New, []byte(token))
	h.Write([]byte(label))
	h.Write(serverNonce)
	h.Write(clientNonce)
	return h.Sum(nil)
}

func newNonce() ([]byte, error) {
	n := make([]byte, nonceBytes)
	if _, err := rand.Read(n); err != nil {
		return nil, fmt.Errorf("tcpstore: reading random nonce: %w", err)
	}
	return n, nil
}

func writeFrame(w io.Writer, payload []byte) error {
	b := appendFrameHeader(make([]byte, 0, frameHeaderBytes+len(payload)))
	b = append(b, payload...)
	_, err := w.Write(finishFrame(b))
	return err
}

func encodeHello(serverNonce []byte) []byte {
	b := append([]byte{}, helloMagic...)
	b = append(b, protocolVersion)
	return append(b, serverNonce...)
}

func decodeHello(p []byte) (serverNonce []byte, err error) {
	if !bytes.HasPrefix(p, helloMagic) {
		return nil, fmt.Errorf("%w: the peer is not a cohort store (bad greeting)", errMalformed)
	}
	p = p[len(helloMagic):]
	if len(p) < 1 {
		return nil, fmt.Errorf("%w: greeting truncated", errMalformed)
	}
	if p[0] != protocolVersion {
		return nil, fmt.Errorf("%w: server speaks protocol version %d, this client version %d", errMalformed, p[0], protocolVersion)
	}
	p = p[1:]
	if len(p) != nonceBytes {
		return nil, fmt.Errorf("%w: greeting nonce is %d bytes, want %d", errMalformed, len(p), nonceBytes)
	}
	return bytes.Clone(p), nil
}

// clientReply is the client's answer to the greeting.
type clientReply struct {
	hasToken    bool
	clientNonce []byte
	mac         []byte
}

func encodeClientReply(r clientReply) []byte {
	b := append([]byte{}, replyMagic...)
	b = append(b, protocolVersion)
	b = appendBool(b, r.hasToken)
	b = append(b, r.clientNonce...)
	return append(b, r.mac...)
}

func decodeClientReply(p []byte) (clientReply, error) {
	if !bytes.HasPrefix(p, replyMagic) {
		return clientReply{}, fmt.Errorf("%w: the peer is not a cohort store client (bad greeting reply)", errMalformed)
	}
	p = p[len(replyMagic):]
	if len(p) != 2+nonceBytes+macBytes {
		return clientReply{}, fmt.Errorf("%w: greeting reply is %d bytes after the magic, want %d", errMalformed, len(p), 2+nonceBytes+macBytes)
	}
	if p[0] != protocolVersion {
		return clientReply{}, fmt.Errorf("%w: client speaks protocol version %d, this server version %d", errMalformed, p[0], protocolVersion)
	}
	if p[1] > 1 {
		return clientReply{}, fmt.Errorf("%w: token flag %d", errMalformed, p[1])
	}
	return clientReply{
		hasToken:    p[1] == 1,
		clientNonce: bytes.Clone(p[2 : 2+nonceBytes]),
		mac:         bytes.Clone(p[2+nonceBytes:]),
	}, nil
}

// serverHandshake authenticates a new connection. It returns a reason
// fit for the log when the client is refused (refused is then true; the
// caller logs it, then sends it with writeRefusal), or an I/O or protocol
// error.
//
// accept runs once the client has proved its token, right before the
// acceptance is sent; if it reports that the connection was evicted (it
// is closed), the handshake fails instead, so that the client never
// believes itself connected on a connection the server dropped.
func serverHandshake(rw io.ReadWriter, token string, accept func() (evicted bool)) (refused bool, reason string, err error) {
	serverNonce, err := newNonce()
	if err != nil {
		return false, "", err
	}
	if err := writeFrame(rw, encodeHello(serverNonce)); err != nil {
		return false, "", fmt.Errorf("sending greeting: %w", err)
	}
	p, err := readFrame(rw, handshakeMaxBytes)
	if err != nil {
		return false, "", fmt.Errorf("reading greeting reply: %w", err)
	}
	reply, err := decodeClientReply(p)
	if err != nil {
		return false, "", err
	}
	want := mac(token, clientLabel, serverNonce, reply.clientNonce)
	if !hmac.Equal(want, reply.mac) {
		switch {
		case !reply.hasToken:
			reason = "client has no token but this server requires one"
		case token == "":
			reason = "client presented a token but this server has none"
		default:
			reason = "client's token does not match"
		}
		return true, reason, nil
	}
	if accept() {
		return false, "", errEvicted
	}
	proof := mac(token, serverLabel, serverNonce, reply.clientNonce)
	if err := writeFrame(rw, append([]byte{0}, proof...)); err != nil {
		return false, "", fmt.Errorf("sending acceptance: %w", err)
	}
	return false, "", nil
}

// writeRefusal tells a refused client why; best effort, the connection is
// closed next.
func writeRefusal(w io.Writer, reason string) {
	writeFrame(w, append([]byte{1}, reason...))
}

// clientHandshake authenticates to a server. Errors from a refusal or a
// failed server proof wrap ErrAuth.
func clientHandshake(rw io.ReadWriter, token string) error {
	p, err := readFrame(rw, handshakeMaxBytes)
	if err != nil {
		return fmt.Errorf("reading greeting: %w", err)
	}
	serverNonce, err := decodeHello(p)
	if err != nil {
		return err
	}
	clientNonce, err := newNonce()
	if err != nil {
		return err
	}
	reply := clientReply{hasToken: token != "", clientNonce: clientNonce, mac: mac(token, clientLabel, serverNonce, clientNonce)}
	if err := writeFrame(rw, encodeClientReply(reply)); err != nil {
		return fmt.Errorf("sending greeting reply: %w", err)
	}
	p, err = readFrame(rw, handshakeMaxBytes)
	if err != nil {
		return fmt.Errorf("reading the server's verdict: %w", err)
	}
	if len(p) == 0 {
		return fmt.Errorf("%w: empty verdict", errMalformed)
	}
	switch p[0] {
	case 0:
		if len(p) != 1+macBytes || !hmac.Equal(p[1:], mac(token, serverLabel, serverNonce, clientNonce)) {
			return fmt.Errorf("%w: the server could not prove it holds this client's token (different token on the server?)", ErrAuth)
		}
		return nil
	case 1:
		hint := "set the same COHORT_TOKEN for every process of the job"
		if token == "" {
			hint = "this client has no token; " + hint
		}
		return fmt.Errorf("%w: server refused the connection: %s (%s)", ErrAuth, sanitize(p[1:]), hint)
	default:
		return fmt.Errorf("%w: verdict byte %d", errMalformed, p[0])
	}
}

// sanitize keeps a peer-supplied message printable and short.
func sanitize(b []byte) string {
	const max = 120
	if len(b) > max {
		b = b[:max]
	}
	out := make([]rune, 0, len(b))
	for _, r := range string(b) {
		if r < 0x20 || r == 0x7f || r == 0xfffd {
			r = '?'
		}
		out = append(out, r)
	}
	return string(out)
}
