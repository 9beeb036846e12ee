package trace

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"
)

// Tracks, in display order. Any other name works too (it sorts after).
const (
	Step    = "step"    // a whole training step
	Data    = "data"    // waiting for the next batch
	Compute = "compute" // forward, backward, optimizer step
	Comm    = "comm"    // collectives: each bucket's all-reduce from launch to finish
	P2P     = "p2p"     // pipeline send/recv
)

var trackOrder = map[string]int{Step: 0, Data: 1, Compute: 2, Comm: 3, P2P: 4}

// FileName is the name of rank's trace file in the trace directory.
func FileName(rank int) string { return fmt.Sprintf("rank-%d.json", rank) }

// Tracer writes one rank's trace. Its methods are safe for concurrent
// use, and a nil *Tracer records nothing.
type Tracer struct {
	mu     sync.Mutex
	f      *os.File
	w      *bufio.Writer
	rank   int
	start  time.Time
	lanes  map[string][]bool // per track: lane busy?
	tids   map[laneKey]int   // track/lane → tid
	buf    []byte
	err    error
	closed bool
}

// Open creates dir (if needed) and dir/rank-N.json and starts rank's
// trace; ts 0 is the moment Open runs, whose Unix time the file records
// (Merge aligns ranks with it).
func Open(dir string, rank int) (*Tracer, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("trace: rank %d: %w", rank, err)
	}
	path := filepath.Join(dir, FileName(rank))
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("trace: rank %d: %w", rank, err)
	}
	t := &Tracer{f: f, w: bufio.NewWriterSize(f, 64<<10), rank: rank, start: time.Now(),
		lanes: map[string][]bool{}, tids: map[laneKey]int{}}
	fmt.Fprintf(t.w, "[\n{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"args\":{\"name\":\"rank %d\"}},\n", rank, rank)
	fmt.Fprintf(t.w, "{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"args\":{\"sort_index\":%d}},\n", rank, rank)
	fmt.Fprintf(t.w, "{\"name\":%q,\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"args\":{\"unix_us\":%d}}", clockEvent, rank, t.start.UnixMicro())
	return t, nil
}

// clockEvent is the metadata event carrying the file's time origin.
const clockEvent = "cohort_clock"

// Span is an open span; End closes it. The zero Span does nothing.
type Span struct {
	t     *Tracer
	track string
	lane  int
	name  string
	begin time.Duration
}

// Begin opens a span named name on track.
func (t *Tracer) Begin(track, name string) Span {
	if t == nil {
		return Span{}
	}
	now := time.Since(t.start)
	t.mu.Lock()
	lanes := t.lanes[track]
	lane := 0
	for lane < len(lanes) && lanes[lane] {
		lane++
	}
	if lane == len(lanes) {
		lanes = append(lanes, true)
	} else {
		lanes[lane] = true
	}
	t.lanes[track] = lanes
	t.mu.Unlock()
	return Span{t: t, track: track, lane: lane, name: name, begin: now}
}

// End closes the span and writes it.
func (s Span) End() {
	t := s.t
	if t == nil {
		return
	}
	end := time.Since(t.start)
	t.mu.Lock()
	defer t.mu.Unlock()
	t.lanes[s.track][s.lane] = false
	if t.closed || t.err != nil {
		return
	}
	tid := t.tid(s.track, s.lane)
	b := t.buf[:0]
	b = append(b, ",\n{\"name\":"...)
	b = strconv.AppendQuote(b, s.name)
	b = append(b, ",\"cat\":"...)
	b = strconv.AppendQuote(b, s.track)
	b = append(b, ",\"ph\":\"X\",\"ts\":"...)
	b = appendMicros(b, s.begin)
	b = append(b, ",\"dur\":"...)
	b = appendMicros(b, end-s.begin)
	b = append(b, ",\"pid\":"...)
	b = strconv.AppendInt(b, int64(t.rank), 10)
	b = append(b, ",\"tid\":"...)
	b = strconv.AppendInt(b, int64(tid), 10)
	b = append(b, '}')
	t.buf = b
	_, t.err = t.w.Write(b)
}

// Instant marks a moment (a restart, a watchdog report) on track.
func (t *Tracer) Instant(track, name string) {
	if t == nil {
		return
	}
	now := time.Since(t.start)
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed || t.err != nil {
		return
	}
	tid := t.tid(track, 0)
	b := append(t.buf[:0], ",\n{\"name\":"...)
	b = strconv.AppendQuote(b, name)
	b = append(b, ",\"ph\":\"i\",\"s\":\"t\",\"ts\":"...)
	b = appendMicros(b, now)
	b = append(b, fmt.Sprintf(",\"pid\":%d,\"tid\":%d}", t.rank, tid)...)
	t.buf = b
	_, t.err = t.w.Write(b)
}

// tid returns (declaring on first use) the thread of track's lane. t.mu held.
func (t *Tracer) tid(track string, lane int) int {
	key := laneKey{track, lane}
	if id, ok := t.tids[key]; ok {
		return id
	}
	order, ok := trackOrder[track]
	if !ok {
		order = len(trackOrder) + len(t.tids)
	}
	id := 1 + order*64 + lane
	t.tids[key] = id
	name := track
	if lane > 0 {
		name = fmt.Sprintf("%s #%d", track, lane+1)
	}
	fmt.Fprintf(t.w, ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"args\":{\"name\":%q}}", t.rank, id, name)
	fmt.Fprintf(t.w, ",\n{\"name\":\"thread_sort_index\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"args\":{\"sort_index\":%d}}", t.rank, id, id)
	return id
}

type laneKey struct {
	track string
	lane  int
}

// appendMicros renders d in microseconds with nanosecond digits.
func appendMicros(b []byte, d time.Duration) []byte {
	ns := int64(d)
	b = strconv.AppendInt(b, ns/1000, 10)
	frac := ns % 1000
	b = append(b, '.', byte('0'+frac/100), byte('0'+frac/10%10), byte('0'+frac%10))
	return b
}

// Flush writes buffered events to the file (a crash loses at most what
// came after the last Flush; the files stay loadable without the closing
// bracket).
func (t *Tracer) Flush() error { return t.finish(false) }

// Close ends the file. Spans still open are dropped.
func (t *Tracer) Close() error { return t.finish(true) }

// finish flushes the buffered events and, when closing, ends the JSON
// array and closes the file first. The first error sticks; after Close
// both are no-ops.
func (t *Tracer) finish(closing bool) error {
	if t == nil {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil
	}
	t.closed = closing
	if closing && t.err == nil {
		_, t.err = t.w.WriteString("\n]\n")
	}
	if t.err == nil {
		t.err = t.w.Flush()
	}
	if closing {
		if err := t.f.Close(); t.err == nil {
			t.err = err
		}
	}
	if t.err != nil {
		return fmt.Errorf("trace: rank %d: %w", t.rank, t.err)
	}
	return nil
}

// SpanFunc returns t's Begin as a function that opens a span and returns
// its End: the shape of hooks such as ddp.Options.Span. It is nil for a
// nil Tracer, so a hook left nil costs nothing.
func (t *Tracer) SpanFunc() func(track, name string) (end func()) {
	if t == nil {
		return nil
	}
	return func(track, name string) func() { return t.Begin(track, name).End }
}
