package launch

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"sync"
)

// maxLineBytes bounds one output line; longer lines are split.
const maxLineBytes = 64 << 10

// lineWriter writes whole lines to w, one at a time, so lines from
// different workers never interleave mid-line.
type lineWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (lw *lineWriter) writeLine(prefix, line []byte) {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	buf := make([]byte, 0, len(prefix)+len(line)+1)
	buf = append(append(append(buf, prefix...), line...), '\n')
	lw.w.Write(buf) // output errors must not stop the job
}

// tail keeps the last n lines written to it, and the first that reads
// as the writer's own error (see errorLine).
type tail struct {
	mu    sync.Mutex
	lines []string
	next  int
	full  bool
	cause string
}

func newTail(n int) *tail { return &tail{lines: make([]string, n)} }

// errorPrefixes start the lines in which a Go program states why it
// failed before the rest of its output buries it: a panic's message, the
// runtime's fatal error, and the flag package's errors, which come before
// a usage text longer than the tail.
var errorPrefixes = []string{
	"panic: ", "fatal error: ",
	"flag provided but not defined: ", "invalid value ", "invalid boolean value ",
	"flag needs an argument: ", "bad flag syntax: ",
}

// errorLine reports whether line is one of those.
func errorLine(line []byte) bool {
	for _, p := range errorPrefixes {
		if bytes.HasPrefix(line, []byte(p)) {
			return true
		}
	}
	return false
}

func (t *tail) add(line []byte) {
	if len(t.lines) == 0 {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.cause == "" && errorLine(line) {
		t.cause = string(line)
	}
	t.lines[t.next] = string(line)
	t.next = (t.next + 1) % len(t.lines)
	if t.next == 0 {
		t.full = true
	}
}

// snapshot returns the kept lines, oldest first.
func (t *tail) snapshot() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.full {
		return append([]string(nil), t.lines[:t.next]...)
	}
	return append(append([]string(nil), t.lines[t.next:]...), t.lines[:t.next]...)
}

// errorCause returns the first line that read as the writer's own
// error, or "".
func (t *tail) errorCause() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.cause
}

// sink is one destination of a worker's stream: a writer and the prefix
// its lines get.
type sink struct {
	w      *lineWriter
	prefix []byte
}

// pump copies lines from r to every sink (and into keep, if not nil)
// until EOF or a read error (a deadline set to cut off descendants that
// hold the pipe). A final line without a newline is completed.
func pump(r *os.File, sinks []sink, keep *tail) {
	br := bufio.NewReaderSize(r, maxLineBytes)
	for {
		line, err := br.ReadSlice('\n')
		if len(line) > 0 {
			line = bytes.TrimSuffix(line, []byte{'\n'})
			line = bytes.TrimSuffix(line, []byte{'\r'})
			for _, s := range sinks {
				s.w.writeLine(s.prefix, line)
			}
			if keep != nil {
				keep.add(line)
			}
		}
		switch {
		case err == nil, errors.Is(err, bufio.ErrBufferFull):
			continue
		default:
			return
		}
	}
}
