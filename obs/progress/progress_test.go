package progress

import (
	"bytes"
	"io"
	"strings"
	"testing"
	"time"
)

func TestPlainLines(t *testing.T) {
	var out bytes.Buffer
	no := false
	b := New(Options{Total: 100, Out: &out, Terminal: &no, Every: time.Hour})
	for i := range 50 {
		b.Update(Status{Step: i, Epoch: 1, Loss: 1 / float64(i+1), Throughput: 1000})
	}
	b.Finish()
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 || strings.Contains(out.String(), "\r") {
		t.Fatalf("got %q, want 2 plain lines (first step, finish) and no carriage returns", out.String())
	}
	for _, want := range []string{"step 50/100 (50%)", "epoch 1", "loss 0.0200", "1000 samples/s", "eta "} {
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
		b.Update(Status{Step: i, Epoch: 1, Loss: 0.5, Throughput: 99})
		time.Sleep(15 * time.Millisecond)
	}
	b.Finish()
	if !strings.Contains(out.String(), "\r") || !strings.Contains(out.String(), "loss 0.5000") {
		t.Errorf("terminal output %q: want in-place redraws (\\r) showing the loss", out.String())
	}
}

// screen replays terminal output: '\r' returns to the line's start, '\n'
// starts a new line, any other byte overwrites the one under the cursor.
// It returns the lines as a person would see them, right-trimmed.
func screen(out string) []string {
	var lines [][]rune
	var cur []rune
	col := 0
	for _, r := range out {
		switch r {
		case '\r':
			col = 0
		case '\n':
			lines = append(lines, cur)
			cur, col = nil, 0
		default:
			if col < len(cur) {
				cur[col] = r
			} else {
				cur = append(cur, r)
			}
			col++
		}
	}
	lines = append(lines, cur)
	s := make([]string, len(lines))
	for i, l := range lines {
		s[i] = strings.TrimRight(string(l), " ")
	}
	return s
}

// TestLinesThroughBar: a program's lines written through the bar on a
// terminal come out whole (the bar cleared before, drawn after), in
// pieces too, and the bar is back after each line.
func TestLinesThroughBar(t *testing.T) {
	var out bytes.Buffer
	yes := true
	b := New(Options{Total: 10, Out: &out, Terminal: &yes, Unit: "tokens"})
	b.Update(Status{Step: 0, Epoch: 1, Loss: 0.75, Throughput: 1234})
	io.WriteString(b, "epoch 1: train loss 0.7500\n")
	b.Update(Status{Step: 1, Epoch: 1, Loss: 0.5, Throughput: 1234})
	io.WriteString(b, "epoch 2: train loss 0.5000")
	b.Update(Status{Step: 2, Epoch: 2, Loss: 0.5, Throughput: 1234}) // mid-line: not drawn over it
	io.WriteString(b, ", more\n")
	afterLine := out.String()
	b.Finish()
	lines := screen(out.String())
	want := map[string]bool{"epoch 1: train loss 0.7500": false, "epoch 2: train loss 0.5000, more": false}
	for _, l := range lines {
		if _, ok := want[l]; ok {
			want[l] = true
		} else if strings.HasPrefix(l, "epoch 1:") || strings.HasPrefix(l, "epoch 2:") {
			t.Errorf("log line mixed with the bar: %q", l)
		}
	}
	for l, seen := range want {
		if !seen {
			t.Errorf("line %q not on the screen:\n%s", l, strings.Join(lines, "\n"))
		}
	}
	last := screen(afterLine)
	if bar := last[len(last)-1]; !strings.Contains(bar, "tokens/s") || !strings.Contains(bar, "epoch 2") {
		t.Errorf("after the line the screen ends with %q, want the bar redrawn (epoch 2, tokens/s)", bar)
	}
	if end := lines[len(lines)-2]; !strings.HasPrefix(end, "step 3/10 (30%) epoch 2 loss 0.5000 1234 tokens/s") {
		t.Errorf("last line %q, want the plain summary", end)
	}
}

// TestNoEpoch: a run without epochs (GPT's random windows) shows none.
func TestNoEpoch(t *testing.T) {
	var out bytes.Buffer
	no := false
	b := New(Options{Total: 4, Out: &out, Terminal: &no, Unit: "tokens"})
	b.Update(Status{Step: 0, Loss: 3, Throughput: 5000})
	b.Finish()
	if strings.Contains(out.String(), "epoch") || !strings.Contains(out.String(), "5000 tokens/s") {
		t.Errorf("got %q: want no epoch and tokens/s", out.String())
	}
}

// TestNothingAfterFinish: a run that ends early (an error, a signal)
// finishes the bar before its last lines; they must not bring it back.
func TestNothingAfterFinish(t *testing.T) {
	var out bytes.Buffer
	yes := true
	b := New(Options{Total: 100, Out: &out, Terminal: &yes})
	b.Update(Status{Step: 3, Epoch: 1, Loss: 0.5, Throughput: 10})
	b.Finish()
	n := out.Len()
	io.WriteString(b, "stopped at step 4\n")
	b.Update(Status{Step: 4, Epoch: 1, Loss: 0.5, Throughput: 10})
	b.Finish()
	if got := out.String()[n:]; got != "stopped at step 4\n" {
		t.Errorf("after Finish: %q, want only the line", got)
	}
}
