package gemm

import (
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Parallel calls share their parts with helper goroutines kept by the
// Impl. Starting or waking a goroutine whose thread sleeps costs the wake
// of a CPU (tens of microseconds in a virtual machine, as long as a whole
// 64×1024×1024 product on one of its cores), so a helper that has
// finished a part keeps polling for the next call for spinWait, yielding
// to any other runnable goroutine meanwhile, and only then exits. Calls
// that follow each other closely (the layers of a training step) find it
// running; after a quiet spell no goroutine is left behind.
//
// The caller never waits for a helper to start: it claims parts itself
// until none is left, so a call whose helpers are slow to arrive runs at
// one thread's speed, not slower.

// spinWait is how long an idle helper polls for the next call, and how
// long a caller polls for its helpers' parts before it blocks.
const spinWait = 100 * time.Microsecond

// coldMinFlops is the work below which a call that finds no helper
// polling runs on one thread: a helper woken from sleep would arrive after
// the call is over, and splitting costs packing twice. Such a call starts
// the helpers anyway, for the calls after it.
const coldMinFlops = 32 << 20

// pool holds the helpers of one Impl.
type pool struct {
	mu   sync.Mutex
	idle []*helper // polling for a job; each one's channel is empty
	live int       // helper goroutines started and not exited
}

// warm reports whether a helper is polling for a job now. When none is,
// it starts helpers, up to n live, which poll for spinWait once they run.
func (pl *pool) warm(n int) bool {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	if len(pl.idle) > 0 {
		return true
	}
	for ; pl.live < n; pl.live++ {
		go pl.serve(&helper{jobs: make(chan *job, 1)}, nil)
	}
	return false
}

// helper is one helper goroutine's mailbox.
type helper struct {
	jobs chan *job // capacity 1
}

// job is one parallel call: parts numbered 0..parts-1, claimed in order by
// the caller and its helpers.
type job struct {
	do      func(part int)
	parts   int32
	next    atomic.Int32  // next part to claim
	pending atomic.Int32  // parts not finished
	fin     chan struct{} // closed when pending reaches 0

	mu       sync.Mutex
	panicked any // first panic of a part
}

// parallel runs do(0), …, do(parts-1) on the calling goroutine and up to
// helpers others, returning when all have returned. Parts must be
// independent. A panic in a part is re-raised here, after every part has
// finished.
func (pl *pool) parallel(helpers, parts int, do func(part int)) {
	j := &job{do: do, parts: int32(parts), fin: make(chan struct{})}
	j.pending.Store(int32(parts))
	pl.mu.Lock()
	for range min(helpers, parts-1) {
		if n := len(pl.idle); n > 0 {
			h := pl.idle[n-1]
			pl.idle = pl.idle[:n-1]
			h.jobs <- j // never blocks: an idle helper's channel is empty
		} else if pl.live < helpers {
			pl.live++
			go pl.serve(&helper{jobs: make(chan *job, 1)}, j)
		}
	}
	pl.mu.Unlock()
	j.work()
	j.wait()
	if j.panicked != nil {
		panic(fmt.Sprintf("gemm: worker: %v", j.panicked))
	}
}

// serve is a helper goroutine's loop: run j's parts (j may be nil), then
// wait for the next job for spinWait, or exit.
func (pl *pool) serve(h *helper, j *job) {
	for {
		if j != nil {
			j.work()
		}
		pl.mu.Lock()
		pl.idle = append(pl.idle, h)
		pl.mu.Unlock()
		if j = pl.await(h); j == nil {
			return
		}
	}
}

// await polls h's mailbox for spinWait. It returns the job that arrives,
// or nil when none did and h has left the idle list.
func (pl *pool) await(h *helper) *job {
	deadline := time.Now().Add(spinWait)
	for {
		select {
		case j := <-h.jobs:
			return j
		default:
		}
		if time.Now().After(deadline) {
			break
		}
		runtime.Gosched()
	}
	pl.mu.Lock()
	defer pl.mu.Unlock()
	if i := slices.Index(pl.idle, h); i >= 0 {
		pl.idle = slices.Delete(pl.idle, i, i+1)
		pl.live--
		return nil
	}
	// A caller took h off the list; it sent the job while holding mu.
	return <-h.jobs
}

// work claims and runs parts until none is left.
func (j *job) work() {
	for {
		p := j.next.Add(1) - 1
		if p >= j.parts {
			return
		}
		j.run(int(p))
	}
}

func (j *job) run(p int) {
	defer func() {
		if r := recover(); r != nil {
			j.mu.Lock()
			if j.panicked == nil {
				j.panicked = r
			}
			j.mu.Unlock()
		}
		if j.pending.Add(-1) == 0 {
			close(j.fin)
		}
	}()
	j.do(p)
}

// wait returns when every part has finished, polling for spinWait before
// it blocks.
func (j *job) wait() {
	deadline := time.Now().Add(spinWait)
	for {
		select {
		case <-j.fin:
			return
		default:
		}
		if time.Now().After(deadline) {
			<-j.fin
			return
		}
		runtime.Gosched()
	}
}
