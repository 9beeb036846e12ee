package bench

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

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

func TestSummarize(t *testing.T) {
	for _, tc := range []struct {
		name                       string
		pred, meas                 []float64
		wantPred, wantMeas, lo, hi float64
	}{
		{"one", []float64{110}, []float64{100}, 110, 100, 100, 100},
		{"three", []float64{120, 100, 110}, []float64{300, 100, 200}, 110, 200, 100, 300},
		{"four", []float64{1, 2, 3, 4}, []float64{10, 40, 20, 30}, 2.5, 25, 10, 40},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var xs []validateSample
			for i := range tc.pred {
				xs = append(xs, validateSample{pred: tc.pred[i], measured: tc.meas[i], load: float64(i)})
			}
			s := summarize(xs)
			if s.Pred != tc.wantPred || s.Measured != tc.wantMeas || s.Min != tc.lo || s.Max != tc.hi || s.Rounds != len(xs) {
				t.Fatalf("summarize = %+v, want medians %v / %v, range %v–%v", s, tc.wantPred, tc.wantMeas, tc.lo, tc.hi)
			}
			if want := (tc.wantPred - tc.wantMeas) / tc.wantMeas; math.Abs(s.Err-want) > 1e-12 {
				t.Errorf("error %v, want the error of the medians %v", s.Err, want)
			}
			if s.Load != float64(len(xs)-1) || s.State != 0 || s.StateErr != 0 {
				t.Errorf("load %v state %v (error %v): want the highest load and no state", s.Load, s.State, s.StateErr)
			}
		})
	}
}

// fakeValidate runs validate with args against fakes: bench train gives
// samplesPerSec[round] (× 64 tokens), examples/gpt tokens[round], the
// profile a100-80gb; it returns stdout, the exit status and the profile
// calls' options.
func fakeValidate(t *testing.T, args []string, samplesPerSec, tokens []float64) (string, int, []profileOptions) {
	t.Helper()
	var out, errb strings.Builder
	var profiles []profileOptions
	seen := map[string]int{} // a command's round: how often it ran before
	ve := validateEnv{
		exec: func(_ time.Duration, args []string) (string, error) {
			k := strings.Join(args, " ")
			round := seen[k]
			seen[k]++
			switch {
			case args[0] == "bench" && args[1] == "train":
				return "train: gpt world 1 shard none samples/s " + ftoa(samplesPerSec[round]) + " state-bytes/rank 4096\n", nil
			case args[0] == "bench" && args[1] == "pipeline":
				return "pipeline: schedule x stages 2 microbatches 8 batch 32 tokens/s 5000\n", nil
			case args[0] == "run":
				return "[rank 0] step 40: train loss 3.6738, mean of steps 21–40 3.8054, " + ftoa(tokens[round]) + " tokens/s\n", nil
			}
			return "", errors.New("unexpected command")
		},
		profile: func(o profileOptions) (*plan.Device, error) {
			profiles = append(profiles, o)
			return plan.BuiltinDevice("a100-80gb")
		},
		load:   func() (float64, bool) { return 1.5, true },
		cores:  2,
		stdout: &out, stderr: &errb,
	}
	status := validate(args, ve)
	if status != 0 {
		t.Logf("stderr: %s", errb.String())
	}
	return out.String(), status, profiles
}

func TestValidateRounds(t *testing.T) {
	m, _ := plan.NamedModel("gpt")
	m.GlobalBatch = 32
	dev, _ := plan.BuiltinDevice("a100-80gb")
	fab, _ := plan.BuiltinFabric("local")
	p, err := plan.Predict(&plan.Env{Model: m, Device: dev, Fabric: fab, Cluster: plan.Cluster{Nodes: 1, ProcsPerNode: 1, Cores: 2}},
		plan.Layout{DP: 1, PP: 1, TP: 1, Shard: "none", Microbatches: 1, Schedule: "none", Virtual: 1})
	if err != nil {
		t.Fatal(err)
	}
	pred := strconv.FormatFloat(p.TokensPerSec, 'f', 0, 64)

	t.Run("rounds=3", func(t *testing.T) {
		out, status, profiles := fakeValidate(t, []string{"--ranks", "1", "--gpt", "", "--fabric", "local"}, []float64{300, 100, 200}, nil)
		if status != 0 || len(profiles) != 3 {
			t.Fatalf("status %d, %d profiles: want 0 and one profile a round (3 by default)", status, len(profiles))
		}
		want := "validate: dp 1 pp 1 tp 1 shard none microbatches 1 schedule none predicted tokens/s " + pred +
			" measured 12800 (6400–19200 over 3 rounds) error " + fmt.Sprintf("%+.1f%%", 100*(p.TokensPerSec-12800)/12800) + " load 1.50"
		if !strings.Contains(out, want+" optimizer-state/rank") {
			t.Errorf("output\n%s\nwant a line starting\n%s", out, want)
		}
		if !strings.Contains(out, "worst tokens/s error (of medians)") || !strings.Contains(out, "validate: 1 ranks: the planner picks") {
			t.Errorf("output\n%s\nwant the worst error of medians and the pick", out)
		}
	})
	t.Run("rounds=1", func(t *testing.T) {
		// one round: the format of a single run, no spread
		out, status, profiles := fakeValidate(t, []string{"--ranks", "1", "--gpt", "", "--rounds", "1"}, []float64{200}, nil)
		if status != 0 || len(profiles) != 1 {
			t.Fatalf("status %d, %d profiles: want 0 and 1", status, len(profiles))
		}
		want := "validate: dp 1 pp 1 tp 1 shard none microbatches 1 schedule none predicted tokens/s " + pred + " measured 12800 error "
		if !strings.Contains(out, want) || strings.Contains(out, "rounds") || strings.Contains(out, "of medians") {
			t.Errorf("output\n%s\nwant %q and no spread", out, want)
		}
	})
	t.Run("device", func(t *testing.T) {
		// --device: no profile; the rounds still run every layout again
		out, status, profiles := fakeValidate(t, []string{"--ranks", "1", "--gpt", "", "--rounds", "2", "--device", "a100-80gb"}, []float64{100, 300}, nil)
		if status != 0 || len(profiles) != 0 || !strings.Contains(out, "measured 12800 (6400–19200 over 2 rounds)") {
			t.Errorf("status %d, %d profiles, output\n%s\nwant 0, none, and the median of 2 rounds 12800", status, len(profiles), out)
		}
	})
	t.Run("tp", func(t *testing.T) {
		// a tensor-parallel run at 2 ranks: the profile is asked for tp 2
		exe := filepath.Join(t.TempDir(), "gpt")
		if err := os.WriteFile(exe, []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		out, status, profiles := fakeValidate(t, []string{"--ranks", "2", "--gpt", exe, "--rounds", "3"}, []float64{100, 100, 100}, []float64{9000, 7000, 8000})
		if status != 0 || len(profiles) != 3 || !slices.Equal(profiles[0].tp, []int{2}) {
			t.Fatalf("status %d, profiles %+v: want 0 and 3 profiles for tp [2]", status, profiles)
		}
		if !strings.Contains(out, "tp 2 shard none microbatches 1 schedule none predicted tokens/s ") || !strings.Contains(out, "measured 8000 (7000–9000 over 3 rounds)") {
			t.Errorf("output\n%s\nwant tp 2's median 8000 over 7000–9000", out)
		}
	})
	t.Run("save-devices", func(t *testing.T) {
		// each round's profiled device, written as a file plan loads
		dir := filepath.Join(t.TempDir(), "devices")
		_, status, profiles := fakeValidate(t, []string{"--ranks", "1", "--gpt", "", "--rounds", "2", "--save-devices", dir}, []float64{100, 300}, nil)
		if status != 0 || len(profiles) != 2 {
			t.Fatalf("status %d, %d profiles: want 0 and 2", status, len(profiles))
		}
		for _, n := range []string{"device-round-1.json", "device-round-2.json"} {
			d, err := plan.LoadDevice(filepath.Join(dir, n), os.ReadFile)
			if err != nil {
				t.Fatalf("%s: %v", n, err)
			}
			if d.Name == "" || len(d.Efficiency) == 0 {
				t.Errorf("%s: device %+v: want the profiled device", n, d)
			}
		}
	})
	t.Run("bad", func(t *testing.T) {
		if _, status, _ := fakeValidate(t, []string{"--rounds", "0", "--gpt", ""}, nil, nil); status != 1 {
			t.Errorf("--rounds 0: status %d, want 1", status)
		}
	})
}
