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

// tail keeps the last n lines written to it.
type tail struct {
	mu    sync.Mutex
	lines []string
	next  int
	full  bool
}

func newTail(n int) *tail { return &tail{lines: make([]string, n)} }

func (t *tail) add(line []byte) {
	if len(t.lines) == 0 {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
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
