package bench

import (
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/cohortml/cohort/plan"
)

func TestParseBenchGPT(t *testing.T) {
	out := "[rank 0] step 20: train loss 4.0515, mean of steps 11–20 4.2610, 6386 tokens/s\n" +
		"[rank 0] step 30/40 (75%) epoch 1 loss 3.7537 6998 tokens/s eta 1s\n" +
		"[rank 0] step 40: train loss 3.6738, mean of steps 21–40 3.8054, 4055 tokens/s\n" +
		"[rank 0] 40 steps in 13.4 s of training (4575 tokens/s)\n"
	tokens, state, err := parseBench(out, "gpt")
	if err != nil || tokens != 4055 || state != 0 {
		t.Fatalf("parseBench = %v, %v, %v; want the last log line's 4055 tokens/s", tokens, state, err)
	}
	if _, _, err := parseBench("[rank 0] 40 steps in 13.4 s of training (4575 tokens/s)\n", "gpt"); err == nil {
		t.Fatal("parseBench without a step line: want an error")
	}
}

func TestOutsideSeconds(t *testing.T) {
	dir := t.TempDir()
	// Rank 0: two steps of 10 ms whose pipeline spans cover 8 and 7 ms;
	// rank 1: one step of 10 ms with a receive and a pass covering 9 ms.
	rank0 := `[
{"name":"step 0","cat":"step","ph":"X","ts":0,"dur":10000,"pid":0,"tid":1},
{"name":"F0","cat":"compute","ph":"X","ts":1000,"dur":3000,"pid":0,"tid":2},
{"name":"tied+loss","cat":"comm","ph":"X","ts":6000,"dur":3000,"pid":0,"tid":3},
{"name":"step 1","cat":"step","ph":"X","ts":20000,"dur":10000,"pid":0,"tid":1},
{"name":"F0","cat":"compute","ph":"X","ts":22000,"dur":7000,"pid":0,"tid":2}
]`
	rank1 := `[
{"name":"step 0","cat":"step","ph":"X","ts":0,"dur":10000,"pid":1,"tid":1},
{"name":"recvA0<0","cat":"p2p","ph":"X","ts":500,"dur":4000,"pid":1,"tid":4},
{"name":"F0","cat":"compute","ph":"X","ts":4500,"dur":5000,"pid":1,"tid":2}
]`
	for name, body := range map[string]string{"rank-0.json": rank0, "rank-1.json": rank1} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := OutsideSeconds(dir)
	if err != nil {
		t.Fatal(err)
	}
	// rank 0: 2 and 3 ms outside, the upper median 3 ms; rank 1: 1 ms
	want := []float64{0.003, 0.001}
	if len(got) != 2 || math.Abs(got[0]-want[0]) > 1e-9 || math.Abs(got[1]-want[1]) > 1e-9 {
		t.Fatalf("OutsideSeconds = %v, want %v", got, want)
	}
	// The same directory's compute spans, rank 0's file first; one file
	// alone gives its own.
	spans, err := ComputeSpans(dir)
	if err != nil {
		t.Fatal(err)
	}
	wantSpans := []plan.Span{{Rank: 0, Name: "F0", Seconds: 0.003}, {Rank: 0, Name: "F0", Seconds: 0.007}, {Rank: 1, Name: "F0", Seconds: 0.005}}
	if !slices.Equal(spans, wantSpans) {
		t.Errorf("ComputeSpans(dir) = %v, want %v", spans, wantSpans)
	}
	if spans, err := ComputeSpans(filepath.Join(dir, "rank-1.json")); err != nil || !slices.Equal(spans, wantSpans[2:]) {
		t.Errorf("ComputeSpans(rank-1.json) = %v, %v; want %v", spans, err, wantSpans[2:])
	}
	if _, err := ComputeSpans(t.TempDir()); err == nil || !strings.Contains(err.Error(), "no rank-*.json") {
		t.Errorf("ComputeSpans of an empty directory: %v, want an error naming rank-*.json", err)
	}
}

// TestMeasurePipeline reads a two-rank pipeline's trace directory whose
// files start 1 ms apart (the merge aligns them) with the baseline's
// beside it: rank 1 waits 0.1 ms and 0.6 ms past the end of rank 0's F0
// and F1 (median 0.35 ms, 0.25 ms beyond the fastest); one microbatch's
// passes take 30 ms alone and 35 ms over the two ranks.
func TestMeasurePipeline(t *testing.T) {
	dir := t.TempDir()
	head := func(rank int, unixUS int64) string {
		return `[{"name":"cohort_clock","ph":"M","pid":` + itoa(rank) + `,"tid":0,"args":{"unix_us":` + itoa(int(unixUS)) + `}}`
	}
	span := func(rank int, cat, name string, ts, dur float64) string {
		return `,{"name":"` + name + `","cat":"` + cat + `","ph":"X","ts":` + ftoa(ts) + `,"dur":` + ftoa(dur) + `,"pid":` + itoa(rank) + `,"tid":0}`
	}
	// rank 1's clock starts 1000 µs after rank 0's: its ts are 1000 less
	rank0 := head(0, 1_000_000) + span(0, "compute", "F0", 0, 6000) + span(0, "compute", "F1", 6000, 6000) +
		span(0, "compute", "B0", 30000, 12000) + "]"
	rank1 := head(1, 1_001_000) + span(1, "p2p", "recvA0<0", 0, 5100) + span(1, "compute", "F0", 5100, 5000) +
		span(1, "p2p", "recvA1<0", 10100, 1500) + span(1, "compute", "B0", 11600, 12000) + "]"
	base := head(0, 900_000) + span(0, "compute", "F0", 0, 10000) + span(0, "compute", "B0", 10000, 20000) + "]"
	for name, body := range map[string]string{"rank-0.json": rank0, "rank-1.json": rank1, "baseline/rank-0.json": base} {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	handoff, sb, err := MeasurePipeline(dir)
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(handoff-0.00025) > 1e-9 {
		t.Errorf("hand-off %v s, want 0.00025", handoff)
	}
	if sb.Ranks != 2 || math.Abs(sb.Ratio-35.0/30) > 1e-9 {
		t.Errorf("side by side %+v: want 2 ranks, ratio 35/30", sb)
	}
	if !(sb.Overlap > 0 && sb.Factor > sb.Ratio) {
		t.Errorf("side by side %+v: want some overlap and a factor above the ratio", sb)
	}
	// without the baseline: the hand-off alone, ratio and factor 1
	if err := os.RemoveAll(filepath.Join(dir, "baseline")); err != nil {
		t.Fatal(err)
	}
	if _, sb, err := MeasurePipeline(dir); err != nil || sb.Ratio != 1 || sb.Factor != 1 || sb.Ranks != 0 {
		t.Errorf("without a baseline: %+v, %v; want ratio and factor 1, no ranks", sb, err)
	}
}

func itoa(n int) string     { return strconv.Itoa(n) }
func ftoa(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }
