package gemmbench

import (
	"context"
	"time"
)

// Idle detection. A multi-threaded OpenBLAS keeps its worker threads
// spinning for a while after each call (about 0.1 s in the 0.3 releases)
// so that the next call starts at once. Timed right after it, a
// multi-threaded cohort shares a core with that spinning thread and
// measures at about one thread's speed. WaitIdle lets such threads go to
// sleep before the next timed run.

const (
	idleWindow   = 2 * time.Millisecond
	idleFraction = 0.25 // of one CPU, over idleWindow
)

// WaitIdle blocks until this process has used less than a quarter of one
// CPU over a 2 ms window (the calling goroutine sleeps meanwhile, so the
// use is other threads': OpenBLAS workers spinning between calls, the
// collector), for at most max, or until ctx is done. It reports how long
// it waited and whether the process went idle. On systems where process
// CPU time is not available it returns at once, reporting false.
func WaitIdle(ctx context.Context, max time.Duration) (time.Duration, bool) {
	start := time.Now()
	prev, ok := processCPU()
	if !ok {
		return 0, false
	}
	t := time.NewTimer(idleWindow)
	defer t.Stop()
	for {
		w0 := time.Now()
		select {
		case <-ctx.Done():
			return time.Since(start), false
		case <-t.C:
		}
		cpu, _ := processCPU()
		el := time.Since(w0)
		if float64(cpu-prev) < idleFraction*float64(el) {
			return time.Since(start), true
		}
		if time.Since(start) >= max {
			return time.Since(start), false
		}
		prev = cpu
		t.Reset(idleWindow)
	}
}
