package progress

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func TestPlainLines(t *testing.T) {
	var out bytes.Buffer
	no := false
	b := New(Options{Total: 100, Out: &out, Terminal: &no, Every: time.Hour})
	for i := range 50 {
		b.Update(Status{Step: i, Epoch: 0, Loss: 1 / float64(i+1), SamplesPerSec: 1000})
	}
	b.Finish()
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 || strings.Contains(out.String(), "\r") {
		t.Fatalf("got %q, want 2 plain lines (first step, finish) and no carriage returns", out.String())
	}
	for _, want := range []string{"step 50/100 (50%)", "epoch 0", "loss 0.0200", "1000 samples/s", "eta "} {
		if !strings.Contains(lines[1], want) {
			t.Errorf("last line %q lacks %q", lines[1], want)
		}
	}
}

func TestTerminalRedraws(t *testing.T) {
	var out bytes.Buffer
	yes := true
	b := New(Options{Total: 10, Out: &out, Terminal: &yes})
	for i := range 10 {
		b.Update(Status{Step: i, Epoch: 1, Loss: 0.5, SamplesPerSec: 99})
		time.Sleep(15 * time.Millisecond)
	}
	b.Finish()
	if !strings.Contains(out.String(), "\r") || !strings.Contains(out.String(), "loss 0.5000") {
		t.Errorf("terminal output %q: want in-place redraws (\\r) showing the loss", out.String())
	}
}
