package rendezvous

import (
	"context"
	"strings"

	"github.com/cohortml/cohort/distributed/store"
)

// prefixed is a store whose keys all live under a prefix: the view of one
// elastic round's workers (COHORT_STORE_PREFIX) of a store that outlives
// the round, so no key of an earlier round is ever seen. Error messages
// keep the full key.
type prefixed struct {
	store.Store
	prefix string
}

// WithPrefix returns a view of st in which every key is prefix+key.
// Closing the view closes st. An empty prefix returns st itself.
func WithPrefix(st store.Store, prefix string) store.Store {
	if prefix == "" {
		return st
	}
	return &prefixed{Store: st, prefix: prefix}
}

func (p *prefixed) Set(ctx context.Context, key string, value []byte) error {
	return p.Store.Set(ctx, p.prefix+key, value)
}

func (p *prefixed) Get(ctx context.Context, key string) ([]byte, error) {
	return p.Store.Get(ctx, p.prefix+key)
}

func (p *prefixed) Add(ctx context.Context, key string, delta int64) (int64, error) {
	return p.Store.Add(ctx, p.prefix+key, delta)
}

func (p *prefixed) CompareAndSwap(ctx context.Context, key string, expected, desired []byte) ([]byte, error) {
	return p.Store.CompareAndSwap(ctx, p.prefix+key, expected, desired)
}

func (p *prefixed) Wait(ctx context.Context, keys ...string) error {
	full := make([]string, len(keys))
	for i, k := range keys {
		full[i] = p.prefix + k
	}
	return p.Store.Wait(ctx, full...)
}

func (p *prefixed) Delete(ctx context.Context, key string) (bool, error) {
	return p.Store.Delete(ctx, p.prefix+key)
}

// validPrefix reports whether a COHORT_STORE_PREFIX value is usable.
func validPrefix(p string) bool {
	return !strings.ContainsAny(p, "\x00\n")
}
