package bench

import (
	"math"
	"os"
	"path/filepath"
	"testing"
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
}
