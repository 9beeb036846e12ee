// Package progress is rank 0's progress line: step, epoch, loss,
// throughput and ETA, redrawn in place on a terminal (by
// github.com/schollz/progressbar) and printed as plain periodic lines
// when the output is not a terminal (a log file, the launcher's pipe).
//
// A program's own lines go through the Bar (it is an io.Writer): on a
// terminal the bar is cleared before a line and drawn again after it, so
// neither cuts the other ("…(932/1876) [7s:7s]e" / "poch 1: train loss").
package progress

import (
	"bytes"
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
	// Unit is what Status.Throughput counts ("tokens"); default
	// "samples". The line shows it per second.
	Unit string
}

// Status is the state shown after a step.
type Status struct {
	Step int // 0-based: the line shows Step+1 steps done
	// Epoch counts from 1; 0 means the run has no epochs and the line
	// leaves it out.
	Epoch      int
	Loss       float64
	Throughput float64 // Options.Unit per second, the job's
}

// redrawEvery throttles the bar's redraws.
const redrawEvery = 100 * time.Millisecond

// Bar shows a run's progress. Its methods are safe for concurrent use.
type Bar struct {
	mu    sync.Mutex
	o     Options
	bar   *progressbar.ProgressBar // nil: plain lines
	shown bool                     // the bar is on the screen
	// midLine: the program's last write did not end its line; the bar
	// waits for the line's end before it is drawn again.
	midLine bool
	drawn   time.Time // the bar's last redraw
	start   time.Time
	last    time.Time // the last plain line
	st      Status
	started bool // Update has been called
	done    bool // Finish has been called: nothing is drawn any more
}

// New starts a progress display.
func New(o Options) *Bar {
	if o.Out == nil {
		o.Out = os.Stdout
	}
	if o.Every <= 0 {
		o.Every = 10 * time.Second
	}
	if o.Unit == "" {
		o.Unit = "samples"
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
		// Throttled here, not by the bar, so that a redraw after a
		// program's line is never skipped.
		b.bar = progressbar.NewOptions64(total, progressbar.OptionSetWriter(o.Out),
			progressbar.OptionSetWidth(30), progressbar.OptionShowCount(), progressbar.OptionSetPredictTime(true),
			progressbar.OptionThrottle(0), progressbar.OptionClearOnFinish(),
			progressbar.OptionFullWidth())
	}
	return b
}

// Terminal reports whether b redraws a bar in place.
func (b *Bar) Terminal() bool { return b.bar != nil }

// Update shows s.
func (b *Bar) Update(s Status) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.done {
		return
	}
	b.st, b.started = s, true
	if b.bar != nil {
		now := time.Now()
		if b.midLine || (b.shown && now.Sub(b.drawn) < redrawEvery && (b.o.Total <= 0 || s.Step+1 < b.o.Total)) {
			return // drawn at the line's end, or at the next update
		}
		b.draw(now)
		return
	}
	now := time.Now()
	if b.last.IsZero() || now.Sub(b.last) >= b.o.Every {
		b.last = now
		fmt.Fprintln(b.o.Out, b.line(now))
	}
}

// draw renders the bar with b.st. b.mu held.
func (b *Bar) draw(now time.Time) {
	b.bar.Describe(b.describe())
	b.bar.Set(b.st.Step + 1)
	b.shown, b.drawn = true, now
}

// describe is the bar's text: "epoch 1 loss 0.4123 1234 samples/s".
func (b *Bar) describe() string {
	s := b.st
	d := ""
	if s.Epoch > 0 {
		d = fmt.Sprintf("epoch %d ", s.Epoch)
	}
	return d + fmt.Sprintf("loss %.4f %.0f %s/s", s.Loss, s.Throughput, b.o.Unit)
}

// Write writes a program's output p to Options.Out: on a terminal the bar
// is cleared first, and drawn again once p ends a line. It implements
// io.Writer.
func (b *Bar) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.bar == nil {
		return b.o.Out.Write(p)
	}
	if b.shown && !b.midLine {
		b.bar.Clear()
		b.shown = false
	}
	n, err := b.o.Out.Write(p)
	if len(p) > 0 {
		b.midLine = p[len(p)-1] != '\n'
	}
	if !b.midLine && b.started && !b.done && !b.bar.IsFinished() && bytes.IndexByte(p, '\n') >= 0 {
		b.draw(time.Now())
	}
	return n, err
}

// line renders the plain form: "step 120/1000 (12%) epoch 1 loss 0.4123 1234 samples/s eta 1m2s".
func (b *Bar) line(now time.Time) string {
	s := b.st
	done := s.Step + 1
	l := fmt.Sprintf("step %d", done)
	if b.o.Total > 0 {
		l += fmt.Sprintf("/%d (%d%%)", b.o.Total, 100*done/b.o.Total)
	}
	l += " " + b.describe()
	if b.o.Total > 0 && done > 0 && done < b.o.Total {
		eta := time.Duration(float64(now.Sub(b.start)) / float64(done) * float64(b.o.Total-done))
		l += " eta " + eta.Round(time.Second).String()
	}
	return l
}

// Finish ends the display (a last plain line, or the bar cleared); later
// Updates show nothing and later writes pass straight through.
func (b *Bar) Finish() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.done {
		return
	}
	b.done = true
	if b.bar != nil {
		if b.shown {
			b.bar.Clear()
			b.shown = false
		}
		if b.midLine {
			fmt.Fprintln(b.o.Out)
			b.midLine = false
		}
		b.bar.Exit()
		if b.started {
			fmt.Fprintln(b.o.Out, b.line(time.Now()))
		}
		return
	}
	if !b.last.IsZero() {
		fmt.Fprintln(b.o.Out, b.line(time.Now()))
	}
}
