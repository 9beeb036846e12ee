package gemmbench

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
)

func TestRunSmall(t *testing.T) {
	var out bytes.Buffer
	res, err := Run(context.Background(), &out, Options{
		Shapes:  []Shape{{Name: "tiny", M: 5, N: 7, K: 3}, {Name: "nt", TransB: true, M: 20, N: 33, K: 17}},
		Threads: []int{1, 2},
		Rounds:  2,
		MinTime: time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 4 {
		t.Fatalf("%d results, want 4 (2 shapes × 2 thread counts)", len(res))
	}
	for _, r := range res {
		if r.Cohort <= 0 {
			t.Errorf("%s threads=%d: cohort %v GFLOP/s", r.Shape.Name, r.Threads, r.Cohort)
		}
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	last := lines[len(lines)-1]
	if !strings.HasPrefix(last, "gemm: cohort/openblas median ratio ") {
		t.Errorf("last line %q, want the median ratio line", last)
	}
	t.Log(out.String())
}

func TestRunRejects(t *testing.T) {
	for name, o := range map[string]Options{
		"zero threads":   {Threads: []int{0}},
		"negative round": {Rounds: -1},
		"unknown kernel": {Kernel: "sse", Shapes: []Shape{{Name: "x", M: 1, N: 1, K: 1}}},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := Run(context.Background(), &bytes.Buffer{}, o); err == nil {
				t.Error("Run accepted bad options")
			}
		})
	}
}

func TestRunCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Run(ctx, &bytes.Buffer{}, Options{}); err != context.Canceled {
		t.Errorf("Run on a cancelled context: %v, want context.Canceled", err)
	}
}

func TestRunBF16Small(t *testing.T) {
	var out bytes.Buffer
	res, err := RunBF16(context.Background(), &out, BF16Options{
		Shapes:   []Shape{{Name: "tiny", M: 5, N: 7, K: 3}, {Name: "tn", TransA: true, M: 20, N: 33, K: 17}},
		Threads:  []int{1, 2},
		Rounds:   2,
		MinTime:  time.Millisecond,
		ClockGHz: 2,
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 4 {
		t.Fatalf("%d results, want 4 (2 shapes × 2 thread counts)", len(res))
	}
	for _, r := range res {
		if r.FP32 <= 0 || r.BF16 <= 0 || r.Ratio != r.BF16/r.FP32 {
			t.Errorf("%s threads=%d: fp32 %v, bf16 %v GFLOP/s, ratio %v", r.Shape.Name, r.Threads, r.FP32, r.BF16, r.Ratio)
		}
		// 2 GHz × 64 flop/cycle × threads, twice for bf16.
		if want := 2 * 2 * 64 * float64(r.Threads); r.PeakBF16GFLOP != want {
			t.Errorf("%s threads=%d: bf16 peak %v GFLOP/s, want %v", r.Shape.Name, r.Threads, r.PeakBF16GFLOP, want)
		}
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if last := lines[len(lines)-1]; !strings.HasPrefix(last, "gemm: bf16/fp32 median ratio ") || !strings.HasSuffix(last, "(threads=2)") {
		t.Errorf("last line %q, want the threads=2 median ratio line", last)
	}
	t.Log(out.String())
}
