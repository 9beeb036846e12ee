// Package store defines the key-value store ranks use to find each other
// (rendezvous): addresses, tokens and barriers travel through it. The
// implementations live in memstore (in-process) and tcpstore (a server on
// one rank, clients everywhere); storetest is their shared conformance suite.
package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// ErrNotFound is returned by non-blocking lookups of a missing key.
var ErrNotFound = errors.New("store: key not found")

// ErrClosed is returned by calls on a closed store.
var ErrClosed = errors.New("store: closed")

// Store is a shared key-value map. All methods are safe for concurrent use.
// Calls that can block honour ctx and return an error wrapping ctx.Err()
// that names the key(s) they were waiting for.
type Store interface {
	// Set stores value under key, replacing any earlier value, and wakes
	// every Get/Wait blocked on key.
	Set(ctx context.Context, key string, value []byte) error
	// Get returns the value under key, blocking until it is set.
	Get(ctx context.Context, key string) ([]byte, error)
	// Add atomically adds delta to the integer under key (a missing key
	// counts as 0) and returns the new value.
	Add(ctx context.Context, key string, delta int64) (int64, error)
	// CompareAndSwap sets key to desired if its current value equals
	// expected (a nil expected means "key absent"), and returns the value
	// now stored.
	CompareAndSwap(ctx context.Context, key string, expected, desired []byte) ([]byte, error)
	// Wait blocks until every key is set.
	Wait(ctx context.Context, keys ...string) error
	// Delete removes key and reports whether it existed.
	Delete(ctx context.Context, key string) (bool, error)
	// Close releases the store's resources; blocked calls return ErrClosed.
	Close() error
}

// KeyList formats keys for error messages: quoted, comma-separated, at
// most eight of them followed by a count of the rest.
func KeyList(keys []string) string {
	const show = 8
	var b strings.Builder
	if len(keys) == 1 {
		b.WriteString("key ")
	} else {
		b.WriteString("keys ")
	}
	for i, k := range keys {
		if i == show {
			fmt.Fprintf(&b, " and %d more", len(keys)-show)
			break
		}
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(strconv.Quote(k))
	}
	if len(keys) == 0 {
		b.WriteString("(none)")
	}
	return b.String()
}
