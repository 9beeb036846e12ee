package trace

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// writeRank traces a fake step on rank: data, forward, backward with two
// overlapping bucket all-reduces, optimizer; spans from several goroutines.
func writeRank(t *testing.T, dir string, rank int) {
	t.Helper()
	tr, err := Open(dir, rank)
	if err != nil {
		t.Fatal(err)
	}
	for step := range 3 {
		st := tr.Begin(Step, "step")
		sp := tr.Begin(Data, "batch")
		sp.End()
		sp = tr.Begin(Compute, "forward")
		sp.End()
		bw := tr.Begin(Compute, "backward")
		var wg sync.WaitGroup
		b0 := tr.Begin(Comm, "allreduce bucket 0")
		b1 := tr.Begin(Comm, "allreduce bucket 1") // overlaps bucket 0: a second lane
		wg.Go(func() { time.Sleep(time.Millisecond); b0.End() })
		wg.Go(func() { time.Sleep(2 * time.Millisecond); b1.End() })
		bw.End()
		wg.Wait()
		tr.SpanFunc()(Compute, "optimizer")() // the hook shape opens and ends a span too
		if step == 1 {
			tr.Instant(Step, "restart")
		}
		st.End()
	}
	if err := tr.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := tr.Close(); err != nil {
		t.Fatal(err)
	}
}

func readFile(t *testing.T, path string) []Event {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	ev, err := Read(bytes.NewReader(b), path)
	if err != nil {
		t.Fatal(err)
	}
	return ev
}

func TestTracerWritesValidTrace(t *testing.T) {
	dir := t.TempDir()
	writeRank(t, dir, 0)
	ev := readFile(t, filepath.Join(dir, "rank-0.json"))
	if err := Validate(ev); err != nil {
		t.Fatal(err)
	}
	count := map[string]int{}
	lanes := map[int]bool{}
	for _, e := range ev {
		count[e.Ph+" "+e.Name]++
		if e.Cat == Comm {
			lanes[*e.TID] = true
		}
	}
	for _, want := range []string{"X forward", "X backward", "X allreduce bucket 0", "X allreduce bucket 1", "X optimizer", "X batch", "X step"} {
		if count[want] != 3 {
			t.Errorf("%d %q events, want 3", count[want], want)
		}
	}
	if len(lanes) != 2 {
		t.Errorf("overlapping all-reduces on %d comm threads, want 2", len(lanes))
	}
	if count["i restart"] != 1 || count["M thread_name"] < 5 {
		t.Errorf("instant or thread names missing: %v", count)
	}
}

func TestMerge(t *testing.T) {
	dir := t.TempDir()
	writeRank(t, dir, 0)
	time.Sleep(5 * time.Millisecond)
	writeRank(t, dir, 1)
	// A crashed writer leaves no closing bracket: still merged.
	p := filepath.Join(dir, "rank-1.json")
	b, _ := os.ReadFile(p)
	os.WriteFile(p, bytes.TrimSuffix(bytes.TrimSpace(b), []byte("]")), 0o644)
	var out bytes.Buffer
	n, err := Merge(dir, &out)
	if err != nil || n != 2 {
		t.Fatalf("Merge = %d, %v; want 2 files", n, err)
	}
	ev, err := Read(&out, "merged")
	if err != nil {
		t.Fatal(err)
	}
	if err := Validate(ev); err != nil {
		t.Fatal(err)
	}
	first := map[int]float64{}
	for _, e := range ev {
		if e.Ph == "X" && e.Name == "step" {
			if _, ok := first[*e.PID]; !ok {
				first[*e.PID] = *e.TS
			}
		}
	}
	if len(first) != 2 {
		t.Fatalf("merged trace has steps of %d ranks, want 2", len(first))
	}
	if gap := first[1] - first[0]; gap < 5000 {
		t.Errorf("rank 1 started %.0f µs after rank 0 on the merged timeline, want ≥ 5000 (aligned by clock)", gap)
	}
	if _, err := Merge(t.TempDir(), &out); err == nil || !strings.Contains(err.Error(), "no rank-*.json") {
		t.Errorf("Merge of an empty dir: %v", err)
	}
}

func TestValidateRejects(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	i := func(v int) *int { return &v }
	for _, c := range []struct {
		name string
		ev   []Event
		want string
	}{
		{"no ph", []Event{{Name: "a", PID: i(0), TID: i(0), TS: f(0)}}, "no ph"},
		{"no pid", []Event{{Name: "a", Ph: "X", TS: f(0), Dur: f(1)}}, "no pid"},
		{"no ts", []Event{{Name: "a", Ph: "X", PID: i(0), TID: i(0), Dur: f(1)}}, "no ts"},
		{"no dur", []Event{{Name: "a", Ph: "X", PID: i(0), TID: i(0), TS: f(0)}}, "dur"},
		{"unpaired E", []Event{{Name: "a", Ph: "E", PID: i(0), TID: i(0), TS: f(0)}}, "no open B"},
		{"unended B", []Event{{Name: "a", Ph: "B", PID: i(0), TID: i(0), TS: f(0)}}, "never ended"},
		{"crossing spans", []Event{{Name: "a", Ph: "X", PID: i(0), TID: i(0), TS: f(0), Dur: f(10)},
			{Name: "b", Ph: "X", PID: i(0), TID: i(0), TS: f(5), Dur: f(10)}}, "without nesting"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if err := Validate(c.ev); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("Validate = %v, want an error with %q", err, c.want)
			}
		})
	}
}

func TestNilTracer(t *testing.T) {
	var tr *Tracer
	sp := tr.Begin(Compute, "forward")
	sp.End()
	tr.Instant(Step, "x")
	if err := tr.Flush(); err != nil {
		t.Error(err)
	}
	if err := tr.Close(); err != nil {
		t.Error(err)
	}
}

func BenchmarkSpan(b *testing.B) {
	for _, on := range []bool{false, true} {
		name := "off"
		if on {
			name = "on"
		}
		b.Run(name, func(b *testing.B) {
			var tr *Tracer
			if on {
				var err error
				if tr, err = Open(b.TempDir(), 0); err != nil {
					b.Fatal(err)
				}
				defer tr.Close()
			}
			for b.Loop() {
				sp := tr.Begin(Comm, "allreduce bucket 3")
				sp.End()
			}
		})
	}
}

func TestSpanFuncNil(t *testing.T) {
	var tr *Tracer
	if tr.SpanFunc() != nil {
		t.Error("a nil Tracer's SpanFunc is not nil: hooks would be called for nothing")
	}
}
