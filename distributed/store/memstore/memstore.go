package memstore

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"strconv"
	"sync"

	"github.com/cohortml/cohort/distributed/store"
)

var _ store.Store = (*Store)(nil)

// Store is an in-process key-value store. The zero value is not usable;
// call New. All methods are safe for concurrent use.
type Store struct {
	mu      sync.Mutex
	entries map[string]*entry
	closed  bool
	done    chan struct{} // closed by Close
}

// entry is one key. Invariant: an entry exists only while the key is set
// or while at least one caller waits for it (waiters > 0).
type entry struct {
	value   []byte
	set     bool
	waiters int
	ready   chan struct{} // non-nil while waiters > 0; closed when the key is set
}

// New returns an empty store.
func New() *Store {
	return &Store{entries: make(map[string]*entry), done: make(chan struct{})}
}

// Set stores a copy of value under key and wakes every caller blocked on
// key. A nil value is stored as an empty one (the key is then present).
func (s *Store) Set(ctx context.Context, key string, value []byte) error {
	if err := s.lock(ctx, "set", key); err != nil {
		return err
	}
	defer s.mu.Unlock()
	s.setLocked(key, bytes.Clone(nonNil(value)))
	return nil
}

// setLocked stores v (owned by the store from now on) and wakes waiters.
func (s *Store) setLocked(key string, v []byte) {
	e := s.entries[key]
	if e == nil {
		e = &entry{}
		s.entries[key] = e
	}
	e.value, e.set = v, true
	if e.ready != nil {
		close(e.ready)
		e.ready = nil
	}
}

// Get returns a copy of the value under key, blocking until the key is set,
// ctx ends (the error wraps ctx.Err() and names the key) or the store is
// closed (the error wraps store.ErrClosed).
func (s *Store) Get(ctx context.Context, key string) ([]byte, error) {
	for {
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			return nil, fmt.Errorf("memstore: get %q: %w", key, store.ErrClosed)
		}
		if e := s.entries[key]; e != nil && e.set {
			v := bytes.Clone(e.value)
			s.mu.Unlock()
			return nonNil(v), nil
		}
		if err := ctx.Err(); err != nil {
			s.mu.Unlock()
			return nil, fmt.Errorf("memstore: get %q: %w", key, err)
		}
		e, ready := s.waitLocked(key)
		s.mu.Unlock()
		if err := s.park(ctx, key, e, ready); err != nil {
			return nil, fmt.Errorf("memstore: get %q: %w", key, err)
		}
	}
}

// waitLocked registers one waiter on key and returns the channel that is
// closed when key is next set. The caller must call park (which
// unregisters it).
func (s *Store) waitLocked(key string) (*entry, chan struct{}) {
	e := s.entries[key]
	if e == nil {
		e = &entry{}
		s.entries[key] = e
	}
	e.waiters++
	if e.ready == nil {
		e.ready = make(chan struct{})
	}
	return e, e.ready
}

// park blocks until ready is closed, ctx ends or the store closes, then
// unregisters the waiter. It returns nil when woken by a Set.
func (s *Store) park(ctx context.Context, key string, e *entry, ready chan struct{}) error {
	var err error
	select {
	case <-ready:
	case <-s.done:
		err = store.ErrClosed
	case <-ctx.Done():
		err = ctx.Err()
	}
	s.mu.Lock()
	e.waiters--
	if e.waiters == 0 {
		if e.ready != nil && !e.set {
			// Nobody waits any more; drop the channel so the entry can go.
			e.ready = nil
		}
		if !e.set && s.entries[key] == e {
			delete(s.entries, key)
		}
	}
	s.mu.Unlock()
	return err
}

// Add adds delta to the decimal integer stored under key (a missing key
// counts as 0), stores the result and returns it. A value that is not a
// decimal integer, or a result that overflows int64, is an error and leaves
// the value unchanged.
func (s *Store) Add(ctx context.Context, key string, delta int64) (int64, error) {
	if err := s.lock(ctx, "add", key); err != nil {
		return 0, err
	}
	defer s.mu.Unlock()
	var cur int64
	if e := s.entries[key]; e != nil && e.set {
		n, err := strconv.ParseInt(string(e.value), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("memstore: add %q: value %s is not a decimal integer", key, quoteValue(e.value))
		}
		cur = n
	}
	if (delta > 0 && cur > math.MaxInt64-delta) || (delta < 0 && cur < math.MinInt64-delta) {
		return 0, fmt.Errorf("memstore: add %q: %d%+d overflows int64", key, cur, delta)
	}
	cur += delta
	s.setLocked(key, strconv.AppendInt(nil, cur, 10))
	return cur, nil
}

// CompareAndSwap sets key to a copy of desired if the current value equals
// expected, where a nil expected means "key absent" (an empty non-nil
// expected matches a present, empty value). It returns a copy of the value
// stored afterwards: desired on success, the unchanged current value
// otherwise, nil if the key is (still) absent.
func (s *Store) CompareAndSwap(ctx context.Context, key string, expected, desired []byte) ([]byte, error) {
	if err := s.lock(ctx, "compare-and-swap", key); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	e := s.entries[key]
	present := e != nil && e.set
	switch {
	case !present && expected == nil, present && expected != nil && bytes.Equal(e.value, expected):
		v := bytes.Clone(nonNil(desired))
		s.setLocked(key, v)
		return bytes.Clone(v), nil
	case present:
		return nonNil(bytes.Clone(e.value)), nil
	default:
		return nil, nil
	}
}

// Wait blocks until every key is set, ctx ends or the store closes. The
// error on ctx's end names the keys still missing. Wait with no keys
// returns at once.
func (s *Store) Wait(ctx context.Context, keys ...string) error {
	for {
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			return fmt.Errorf("memstore: wait for %s: %w", store.KeyList(keys), store.ErrClosed)
		}
		missing := ""
		found := false
		for _, k := range keys {
			if e := s.entries[k]; e == nil || !e.set {
				missing, found = k, true
				break
			}
		}
		if !found {
			s.mu.Unlock()
			return nil
		}
		if err := ctx.Err(); err != nil {
			m := s.missingLocked(keys)
			s.mu.Unlock()
			return fmt.Errorf("memstore: wait: %s not set: %w", store.KeyList(m), err)
		}
		e, ready := s.waitLocked(missing)
		s.mu.Unlock()
		if err := s.park(ctx, missing, e, ready); err != nil {
			s.mu.Lock()
			m := s.missingLocked(keys)
			s.mu.Unlock()
			return fmt.Errorf("memstore: wait: %s not set: %w", store.KeyList(m), err)
		}
	}
}

func (s *Store) missingLocked(keys []string) []string {
	var m []string
	for _, k := range keys {
		if e := s.entries[k]; e == nil || !e.set {
			m = append(m, k)
		}
	}
	return m
}

// Delete removes key and reports whether it was set. Callers blocked on
// key keep waiting for its next Set.
func (s *Store) Delete(ctx context.Context, key string) (bool, error) {
	if err := s.lock(ctx, "delete", key); err != nil {
		return false, err
	}
	defer s.mu.Unlock()
	e := s.entries[key]
	if e == nil || !e.set {
		return false, nil
	}
	e.value, e.set = nil, false
	if e.waiters == 0 {
		delete(s.entries, key)
	}
	return true, nil
}

// Close makes every blocked and later call fail with an error wrapping
// store.ErrClosed. It is idempotent and always returns nil.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.closed {
		s.closed = true
		close(s.done)
	}
	return nil
}

// Len reports the number of keys set. It is meant for tests and metrics.
func (s *Store) Len() int {
	return s.sum(func(e *entry) int {
		if e.set {
			return 1
		}
		return 0
	})
}

// Waiters reports how many calls are blocked in Get or Wait. It is meant
// for tests (checking that cancelled callers leave nothing behind) and
// metrics.
func (s *Store) Waiters() int { return s.sum(func(e *entry) int { return e.waiters }) }

// sum adds up f over the entries.
func (s *Store) sum(f func(e *entry) int) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, e := range s.entries {
		n += f(e)
	}
	return n
}

func nonNil(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

func quoteValue(v []byte) string {
	const show = 32
	if len(v) > show {
		return strconv.Quote(string(v[:show])) + "…"
	}
	return strconv.Quote(string(v))
}

// lock begins a call (op, on key): it fails if ctx has ended, then locks
// the store and fails, unlocking it, if the store is closed. It returns
// nil with s.mu held.
func (s *Store) lock(ctx context.Context, op, key string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("memstore: %s %q: %w", op, key, err)
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return fmt.Errorf("memstore: %s %q: %w", op, key, store.ErrClosed)
	}
	return nil
}
