// Package logtest holds what the distributed packages' tests share to
// check log output: a buffer that several goroutines may write to, as the
// sink of a slog handler.
//
// Import it only from _test.go files.
package logtest

import (
	"bytes"
	"sync"
)

// Buffer collects log output written from several goroutines. Its zero
// value is an empty buffer ready to use.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p; it is safe to call concurrently with Write and String.
func (l *Buffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// String returns what has been written so far.
func (l *Buffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
