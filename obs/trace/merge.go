package trace

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Event is one trace event as read back (fields of the trace-event
// format; Args kept raw).
type Event struct {
	Name string          `json:"name"`
	Cat  string          `json:"cat,omitempty"`
	Ph   string          `json:"ph"`
	TS   *float64        `json:"ts,omitempty"`
	Dur  *float64        `json:"dur,omitempty"`
	PID  *int            `json:"pid,omitempty"`
	TID  *int            `json:"tid,omitempty"`
	S    string          `json:"s,omitempty"`
	ID   json.RawMessage `json:"id,omitempty"`
	Args json.RawMessage `json:"args,omitempty"`
}

// MaxFileBytes bounds one trace file that Read accepts.
const MaxFileBytes = 1 << 30

// Read parses a trace: the JSON array format (a missing closing bracket,
// as a crashed writer leaves, is tolerated) or the object format with
// traceEvents.
func Read(r io.Reader, name string) ([]Event, error) {
	data, err := io.ReadAll(io.LimitReader(r, MaxFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("trace: %s: %w", name, err)
	}
	if len(data) > MaxFileBytes {
		return nil, fmt.Errorf("trace: %s: larger than %d bytes", name, MaxFileBytes)
	}
	data = bytes.TrimSpace(data)
	if len(data) > 0 && data[0] == '[' && data[len(data)-1] != ']' {
		data = append(bytes.TrimRight(data, ",\n\t "), ']')
	}
	var events []Event
	if len(data) > 0 && data[0] == '{' {
		var obj struct {
			TraceEvents []Event `json:"traceEvents"`
		}
		err = json.Unmarshal(data, &obj)
		events = obj.TraceEvents
	} else {
		err = json.Unmarshal(data, &events)
	}
	if err != nil {
		return nil, fmt.Errorf("trace: %s: %w", name, err)
	}
	return events, nil
}

// Merge reads every rank-*.json in dir and writes one trace with all the
// ranks on one timeline to w: each file's timestamps are shifted by the
// difference between its time origin and the earliest one (ranks on
// different hosts are as aligned as their clocks). It returns the number
// of files merged.
func Merge(dir string, w io.Writer) (int, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "rank-*.json"))
	if err != nil {
		return 0, fmt.Errorf("trace: merge %s: %w", dir, err)
	}
	if len(paths) == 0 {
		return 0, fmt.Errorf("trace: merge: no rank-*.json files in %s", dir)
	}
	sort.Strings(paths)
	type file struct {
		events []Event
		origin float64 // µs since the Unix epoch
	}
	files := make([]file, 0, len(paths))
	first := 0.0
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			return 0, fmt.Errorf("trace: merge: %w", err)
		}
		events, err := Read(f, p)
		f.Close()
		if err != nil {
			return 0, err
		}
		origin := 0.0
		for _, e := range events {
			if e.Ph == "M" && e.Name == clockEvent {
				var a struct {
					UnixUS float64 `json:"unix_us"`
				}
				if json.Unmarshal(e.Args, &a) == nil {
					origin = a.UnixUS
				}
			}
		}
		if origin > 0 && (first == 0 || origin < first) {
			first = origin
		}
		files = append(files, file{events, origin})
	}
	var all []Event
	for _, f := range files {
		shift := 0.0
		if f.origin > 0 {
			shift = f.origin - first
		}
		for _, e := range f.events {
			if e.TS != nil && shift != 0 {
				ts := *e.TS + shift
				e.TS = &ts
			}
			all = append(all, e)
		}
	}
	var b strings.Builder
	b.WriteString("{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n")
	for i, e := range all {
		if i > 0 {
			b.WriteString(",\n")
		}
		j, err := json.Marshal(e)
		if err != nil {
			return 0, fmt.Errorf("trace: merge: %w", err)
		}
		b.Write(j)
	}
	b.WriteString("\n]}\n")
	if _, err := io.WriteString(w, b.String()); err != nil {
		return 0, fmt.Errorf("trace: merge: %w", err)
	}
	return len(paths), nil
}

// Validate checks events against the trace-event format: every event has
// ph, name, pid and tid, and every non-metadata event a ts; complete
// events (X) have a non-negative dur; on each thread B/E events pair up
// in order and X events nest (a span ends before its enclosing one).
func Validate(events []Event) error {
	type key struct{ pid, tid int }
	stacks := map[key][]string{}
	type span struct{ begin, end float64 }
	spans := map[key][]span{}
	for i, e := range events {
		where := fmt.Sprintf("event %d (%q)", i, e.Name)
		switch {
		case e.Ph == "":
			return fmt.Errorf("trace: %s: no ph", where)
		case e.Name == "" && e.Ph != "E":
			return fmt.Errorf("trace: %s: no name", where)
		case e.PID == nil || e.TID == nil:
			return fmt.Errorf("trace: %s: no pid/tid", where)
		case e.Ph != "M" && e.TS == nil:
			return fmt.Errorf("trace: %s: no ts", where)
		}
		k := key{*e.PID, *e.TID}
		switch e.Ph {
		case "X":
			if e.Dur == nil || *e.Dur < 0 {
				return fmt.Errorf("trace: %s: complete event without a non-negative dur", where)
			}
			spans[k] = append(spans[k], span{*e.TS, *e.TS + *e.Dur})
		case "B":
			stacks[k] = append(stacks[k], e.Name)
		case "E":
			s := stacks[k]
			if len(s) == 0 {
				return fmt.Errorf("trace: %s: E with no open B on pid %d tid %d", where, k.pid, k.tid)
			}
			if e.Name != "" && e.Name != s[len(s)-1] {
				return fmt.Errorf("trace: %s: E closes %q", where, s[len(s)-1])
			}
			stacks[k] = s[:len(s)-1]
		case "M", "i", "I", "C", "b", "e", "n", "s", "t", "f":
		default:
			return fmt.Errorf("trace: %s: unknown ph %q", where, e.Ph)
		}
	}
	for k, s := range stacks {
		if len(s) > 0 {
			return fmt.Errorf("trace: pid %d tid %d: %d B events never ended (first %q)", k.pid, k.tid, len(s), s[0])
		}
	}
	const slack = 0.001 // µs: rounding of ts and dur
	for k, ss := range spans {
		sort.SliceStable(ss, func(i, j int) bool {
			if ss[i].begin != ss[j].begin {
				return ss[i].begin < ss[j].begin
			}
			return ss[i].end > ss[j].end
		})
		var stack []span
		for _, s := range ss {
			for len(stack) > 0 && stack[len(stack)-1].end <= s.begin+slack {
				stack = stack[:len(stack)-1]
			}
			if len(stack) > 0 && s.end > stack[len(stack)-1].end+slack {
				return fmt.Errorf("trace: pid %d tid %d: span [%.3f, %.3f] overlaps [%.3f, %.3f] without nesting", k.pid, k.tid, s.begin, s.end, stack[len(stack)-1].begin, stack[len(stack)-1].end)
			}
			stack = append(stack, s)
		}
	}
	return nil
}
