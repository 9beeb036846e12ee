// Package memstore is an in-process store.Store: a map guarded by a mutex,
// with blocked readers parked on per-key channels (no polling). It serves
// single-process groups and tests directly, and it is the state behind
// tcpstore's server.
//
// Values are copied on the way in and on the way out, so callers may reuse
// their slices. Integers written by Add are stored as decimal ASCII, the
// same representation tcpstore and PyTorch's stores use, so Get on a
// counter returns e.g. "42".
package memstore
