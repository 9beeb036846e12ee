// Package progress is rank 0's progress line: step, epoch, loss,
// samples/s and ETA, redrawn in place on a terminal (by
// github.com/schollz/progressbar) and printed as plain periodic lines
// when the output is not a terminal (a log file, the launcher's pipe).
package progress

import (
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

// Options configures New; the zero value writes to stdout.
type Options struct {
	Total int       // steps in the run; 0 if unknown (no ETA)
	Out   io.Writer // default os.Stdout
	// Terminal forces the redrawn bar (true) or plain lines (false); nil
	// detects whether Out is a terminal.
	Terminal *bool
	// Every is the period of plain lines; default 10 s.
	Every time.Duration
}

// Status is the state shown after a step.
type Status struct {
	Step, Epoch   int
	Loss          float64
	SamplesPerSec float64
}

// Bar shows a run's progress. Its methods are safe for concurrent use.
type Bar struct {
	mu    sync.Mutex
	o     Options
	bar   *progressbar.ProgressBar // nil: plain lines
	start time.Time
	last  time.Time
	st    Status
}

// New starts a progress display.
func New(o Options) *Bar {
	if o.Out == nil {
		o.Out = os.Stdout
	}
	if o.Every <= 0 {
		o.Every = 10 * time.Second
	}
	tty := false
	if o.Terminal != nil {
		tty = *o.Terminal
	} else if f, ok := o.Out.(*os.File); ok {
		tty = term.IsTerminal(int(f.Fd()))
	}
	b := &Bar{o: o, start: time.Now()}
	if tty {
		total := int64(o.Total)
		if total <= 0 {
			total = -1 // a spinner
		}
		b.bar = progressbar.NewOptions64(total, progressbar.OptionSetWriter(o.Out),
			progressbar.OptionSetWidth(30), progressbar.OptionShowCount(), progressbar.OptionSetPredictTime(true),
			progressbar.OptionThrottle(100*time.Millisecond), progressbar.OptionClearOnFinish(),
			progressbar.OptionFullWidth())
	}
	return b
}

// Update shows s.
func (b *Bar) Update(s Status) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.st = s
	if b.bar != nil {
		b.bar.Describe(fmt.Sprintf("epoch %d loss %.4f %.0f samples/s", s.Epoch, s.Loss, s.SamplesPerSec))
		b.bar.Set(s.Step + 1)
		return
	}
	now := time.Now()
	if b.last.IsZero() || now.Sub(b.last) >= b.o.Every {
		b.last = now
		fmt.Fprintln(b.o.Out, b.line(now))
	}
}

// line renders the plain form: "step 120/1000 (12%) epoch 1 loss 0.4123 1234 samples/s eta 1m2s".
func (b *Bar) line(now time.Time) string {
	s := b.st
	done := s.Step + 1
	l := fmt.Sprintf("step %d", done)
	if b.o.Total > 0 {
		l += fmt.Sprintf("/%d (%d%%)", b.o.Total, 100*done/b.o.Total)
	}
	l += fmt.Sprintf(" epoch %d loss %.4f %.0f samples/s", s.Epoch, s.Loss, s.SamplesPerSec)
	if b.o.Total > 0 && done > 0 && done < b.o.Total {
		eta := time.Duration(float64(now.Sub(b.start)) / float64(done) * float64(b.o.Total-done))
		l += " eta " + eta.Round(time.Second).String()
	}
	return l
}

// Finish ends the display (a last plain line, or the bar cleared).
func (b *Bar) Finish() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.bar != nil {
		b.bar.Finish()
		fmt.Fprintln(b.o.Out, b.line(time.Now()))
		return
	}
	if !b.last.IsZero() {
		fmt.Fprintln(b.o.Out, b.line(time.Now()))
	}
}
