// Package handshake authenticates and identifies the two ends of a new
// connection between ranks, for the transports built on byte streams.
//
// The dialer D and the acceptor A exchange wire frames:
//
//	D → A  hello    {D's rank, world size, A's rank, conn index, nonce_D}
//	A → D  welcome  {A's rank, world size, D's rank, conn index, nonce_A,
//	                 MAC(token, label+" accept", nonce_D, nonce_A, A, D, world, conn)}
//	D → A  auth     {…, MAC(token, label+" dial", nonce_A, nonce_D, D, A, world, conn)}
//	A → D  ready
//
// Either side may answer with a refuse frame carrying the reason instead.
// Each side checks the other's proof when it holds a token, so a peer
// without the token, or with another one, is refused in both directions;
// fresh nonces on both sides defeat replay. With no token on either side
// the MACs are zero and unchecked. The caller bounds the exchange with
// the connection's deadline.
package handshake

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"

	"github.com/cohortml/cohort/distributed/transport"
	"github.com/cohortml/cohort/distributed/wire"
)

// maxPayload bounds every handshake frame.
const maxPayload = max(wire.HelloBytes, wire.MaxReasonBytes)

// Config describes this end.
type Config struct {
	Label     string // protocol name, e.g. "cohort-tcp/1"; both ends must agree
	Token     []byte // shared secret; empty for none
	Rank      int
	WorldSize int
}

// RefusedError is returned by Dial when the acceptor refused the
// connection; Reason is the acceptor's text.
type RefusedError struct {
	Peer   int
	Reason string
	Auth   bool // the refusal was an authentication failure
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("handshake: refused by rank %d: %s", e.Peer, e.Reason)
}

func (e *RefusedError) Unwrap() error {
	if e.Auth {
		return transport.ErrAuth
	}
	return nil
}

const authReason = "authentication failed (wrong or missing token)"

func nonce() (n [wire.NonceBytes]byte, err error) {
	_, err = rand.Read(n[:])
	return n, err
}

func (c *Config) mac(suffix string, verifierNonce, proverNonce *[wire.NonceBytes]byte, prover, verifier, conn int) [wire.MACBytes]byte {
	if len(c.Token) == 0 {
		return [wire.MACBytes]byte{}
	}
	return wire.MAC(c.Token, c.Label+suffix, verifierNonce, proverNonce,
		uint32(prover), uint32(verifier), uint32(c.WorldSize), uint32(conn))
}

func send(conn net.Conn, kind wire.Kind, h *wire.Hello) error {
	var p []byte
	if h != nil {
		p = h.Append(make([]byte, 0, wire.HelloBytes))
	}
	return wire.WriteFrame(conn, wire.Header{Kind: kind}, p)
}

func refuse(conn net.Conn, reason string) {
	if len(reason) > wire.MaxReasonBytes {
		reason = reason[:wire.MaxReasonBytes]
	}
	// Best effort: the connection is dropped right after.
	_ = wire.WriteFrame(conn, wire.Header{Kind: wire.KindRefuse}, []byte(reason))
}

// expect reads one frame of kind want (or a refusal) and decodes its Hello
// when it has one.
func expect(conn net.Conn, want wire.Kind, peer int) (wire.Hello, error) {
	h, p, err := wire.ReadFrame(conn, maxPayload)
	if err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return wire.Hello{}, fmt.Errorf("handshake: waiting for %v: %w", want, err)
	}
	if h.Kind == wire.KindRefuse {
		return wire.Hello{}, &RefusedError{Peer: peer, Reason: string(p), Auth: string(p) == authReason}
	}
	if h.Kind != want {
		return wire.Hello{}, fmt.Errorf("handshake: got a %v frame, want %v", h.Kind, want)
	}
	if want == wire.KindReady {
		if len(p) != 0 {
			return wire.Hello{}, fmt.Errorf("handshake: %d-byte ready frame", len(p))
		}
		return wire.Hello{}, nil
	}
	return wire.DecodeHello(p)
}

// Dial runs the dialer's side on conn: this end asks to reach rank peer
// over connection index connIdx.
func Dial(conn net.Conn, cfg Config, peer, connIdx int) error {
	nd, err := nonce()
	if err != nil {
		return fmt.Errorf("handshake: nonce: %w", err)
	}
	hello := wire.Hello{Rank: uint32(cfg.Rank), WorldSize: uint32(cfg.WorldSize), Peer: uint32(peer), Conn: uint32(connIdx), Nonce: nd}
	if err := send(conn, wire.KindHello, &hello); err != nil {
		return fmt.Errorf("handshake: sending hello: %w", err)
	}
	wel, err := expect(conn, wire.KindWelcome, peer)
	if err != nil {
		return err
	}
	switch {
	case int(wel.Rank) != peer:
		err = fmt.Errorf("handshake: the address of rank %d is served by rank %d", peer, wel.Rank)
	case int(wel.WorldSize) != cfg.WorldSize:
		err = fmt.Errorf("handshake: rank %d has world size %d, this rank (%d) has %d", peer, wel.WorldSize, cfg.Rank, cfg.WorldSize)
	case int(wel.Peer) != cfg.Rank || int(wel.Conn) != connIdx:
		err = fmt.Errorf("handshake: rank %d answered for rank %d connection %d, want rank %d connection %d",
			peer, wel.Peer, wel.Conn, cfg.Rank, connIdx)
	case len(cfg.Token) > 0 && !wire.EqualMAC(wel.MAC, cfg.mac(" accept", &nd, &wel.Nonce, peer, cfg.Rank, connIdx)):
		err = fmt.Errorf("handshake: rank %d: %w: it does not hold this job's token", peer, transport.ErrAuth)
	}
	if err != nil {
		if errors.Is(err, transport.ErrAuth) {
			refuse(conn, authReason)
		} else {
			refuse(conn, err.Error())
		}
		return err
	}
	auth := wire.Hello{Rank: hello.Rank, WorldSize: hello.WorldSize, Peer: hello.Peer, Conn: hello.Conn, Nonce: nd,
		MAC: cfg.mac(" dial", &wel.Nonce, &nd, cfg.Rank, peer, connIdx)}
	if err := send(conn, wire.KindAuth, &auth); err != nil {
		return fmt.Errorf("handshake: sending auth: %w", err)
	}
	if _, err := expect(conn, wire.KindReady, peer); err != nil {
		return err
	}
	return nil
}

// Accept runs the acceptor's side on conn and returns the dialer's rank
// and connection index. check vets them (range, direction, peer set)
// before this end proves anything; claim runs only once the dialer has
// proved it holds the token, just before the final ready frame, so that it
// can take a slot (refuse a duplicate) without letting an unauthenticated
// connection hold that slot. An error from either is sent to the dialer as
// the reason for refusing. claim may be nil.
func Accept(conn net.Conn, cfg Config, check, claim func(rank, connIdx int) error) (rank, connIdx int, err error) {
	hello, err := expect(conn, wire.KindHello, -1)
	if err != nil {
		return -1, -1, err
	}
	rank, connIdx = int(hello.Rank), int(hello.Conn)
	switch {
	case int(hello.WorldSize) != cfg.WorldSize:
		err = fmt.Errorf("handshake: rank %d has world size %d, this rank (%d) has %d", rank, hello.WorldSize, cfg.Rank, cfg.WorldSize)
	case int(hello.Peer) != cfg.Rank:
		err = fmt.Errorf("handshake: rank %d dialed rank %d at the address of rank %d", rank, hello.Peer, cfg.Rank)
	case rank >= cfg.WorldSize:
		err = fmt.Errorf("handshake: rank %d out of range [0, %d)", rank, cfg.WorldSize)
	default:
		err = check(rank, connIdx)
	}
	if err != nil {
		refuse(conn, err.Error())
		return rank, connIdx, err
	}
	na, err := nonce()
	if err != nil {
		return rank, connIdx, fmt.Errorf("handshake: nonce: %w", err)
	}
	wel := wire.Hello{Rank: uint32(cfg.Rank), WorldSize: uint32(cfg.WorldSize), Peer: hello.Rank, Conn: hello.Conn, Nonce: na,
		MAC: cfg.mac(" accept", &hello.Nonce, &na, cfg.Rank, rank, connIdx)}
	if err := send(conn, wire.KindWelcome, &wel); err != nil {
		return rank, connIdx, fmt.Errorf("handshake: sending welcome to rank %d: %w", rank, err)
	}
	auth, err := expect(conn, wire.KindAuth, rank)
	if err != nil {
		return rank, connIdx, fmt.Errorf("handshake: rank %d: %w", rank, err)
	}
	if auth.Rank != hello.Rank || auth.Conn != hello.Conn || auth.Nonce != hello.Nonce {
		err = fmt.Errorf("handshake: rank %d changed its hello during the handshake", rank)
	} else if len(cfg.Token) > 0 && !wire.EqualMAC(auth.MAC, cfg.mac(" dial", &na, &hello.Nonce, rank, cfg.Rank, connIdx)) {
		refuse(conn, authReason)
		return rank, connIdx, fmt.Errorf("handshake: rank %d: %w: it does not hold this job's token", rank, transport.ErrAuth)
	}
	if err == nil && claim != nil {
		err = claim(rank, connIdx)
	}
	if err != nil {
		refuse(conn, err.Error())
		return rank, connIdx, err
	}
	if err := send(conn, wire.KindReady, nil); err != nil {
		return rank, connIdx, fmt.Errorf("handshake: sending ready to rank %d: %w", rank, err)
	}
	return rank, connIdx, nil
}
