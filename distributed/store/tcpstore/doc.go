// Package tcpstore serves a store.Store over TCP: a Server (on rank 0, or
// in the launcher) holds the data, every process talks to it through a
// Client.
//
// Protocol. Messages are length-prefixed frames whose declared length is
// checked against a limit (Options.MaxFrameBytes) before anything is
// allocated, then decoded by bounds-checked decoders (fuzzed in this
// package's tests). Each request carries an id, so many goroutines share
// one connection and a blocked Get does not hold up other calls; a caller
// whose context ends withdraws its blocked request on the server. The
// wire format is described in protocol.go.
//
// Authentication. Before any command, client and server each prove they
// hold the shared token with an HMAC-SHA256 challenge–response over fresh
// nonces from both sides (auth.go); the token itself never crosses the
// wire. A client with a wrong or missing token is refused: its Dial fails
// with an error wrapping ErrAuth, and the server logs the refusal with the
// peer's address through Options.Logger. The protocol does not encrypt:
// values travel in clear, so keep secrets other than the token out of the
// store, or run it on a trusted network.
//
// Blocking. The server parks blocked Get and Wait requests on the
// in-memory store's per-key channels (one goroutine per parked request,
// owned by its connection; nothing polls). Every client call is bounded by
// its context; writes are also bounded by Options.WriteTimeout. Close on
// either end fails blocked calls with an error wrapping store.ErrClosed.
package tcpstore
