package gemmbench

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"testing"
	"time"
)

// small is a quick run's options: two shapes (the second named and
// transposed by each test), threads 1 and 2, two short rounds.
var small = Options{Shapes: []Shape{{Name: "tiny", M: 5, N: 7, K: 3}}, Threads: []int{1, 2}, Rounds: 2, MinTime: time.Millisecond}

// smallShapes returns small's shapes and s, 20×33×17.
func smallShapes(s Shape) []Shape {
	s.M, s.N, s.K = 20, 33, 17
	return append(slices.Clone(small.Shapes), s)
}

// lastLine fails t unless a small run gave no error and n results (2
// shapes × 2 thread counts), logs its output and returns its last line.
func lastLine(t *testing.T, n int, err error, out *bytes.Buffer) string {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	if n != 4 {
		t.Fatalf("%d results, want 4 (2 shapes × 2 thread counts)", n)
	}
	t.Log(out.String())
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	return lines[len(lines)-1]
}

func TestRunSmall(t *testing.T) {
	var out bytes.Buffer
	o := small
	o.Shapes = smallShapes(Shape{Name: "nt", TransB: true})
	res, err := Run(context.Background(), &out, o)
	last := lastLine(t, len(res), err, &out)
	for _, r := range res {
		if r.Cohort <= 0 {
			t.Errorf("%s threads=%d: cohort %v GFLOP/s", r.Shape.Name, r.Threads, r.Cohort)
		}
	}
	if !strings.HasPrefix(last, "gemm: cohort/openblas median ratio ") {
		t.Errorf("last line %q, want the median ratio line", last)
	}
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
		Shapes: smallShapes(Shape{Name: "tn", TransA: true}), Threads: small.Threads, Rounds: small.Rounds, MinTime: small.MinTime,
		ClockGHz: 2,
	})
	last := lastLine(t, len(res), err, &out)
	for _, r := range res {
		if r.FP32 <= 0 || r.BF16 <= 0 || r.Ratio != r.BF16/r.FP32 {
			t.Errorf("%s threads=%d: fp32 %v, bf16 %v GFLOP/s, ratio %v", r.Shape.Name, r.Threads, r.FP32, r.BF16, r.Ratio)
		}
		// 2 GHz × 64 flop/cycle × threads, twice for bf16.
		if want := 2 * 2 * 64 * float64(r.Threads); r.PeakBF16GFLOP != want {
			t.Errorf("%s threads=%d: bf16 peak %v GFLOP/s, want %v", r.Shape.Name, r.Threads, r.PeakBF16GFLOP, want)
		}
	}
	if !strings.HasPrefix(last, "gemm: bf16/fp32 median ratio ") || !strings.HasSuffix(last, "(threads=2)") {
		t.Errorf("last line %q, want the threads=2 median ratio line", last)
	}
}
