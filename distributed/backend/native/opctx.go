package native

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cohortml/cohort/distributed/transport"
)

// opCtx is the context an op runs under: it ends when the caller's
// context ends, when the group breaks or closes, or at the op's deadline
// (GroupOptions.Timeout after it started).
//
// It costs nothing until something blocks on it: Err is computed from its
// parents and the clock, and only the first call of Done builds the
// channel (a context.WithDeadline and a context.AfterFunc, which allocate
// and arm a timer). A transport that polls for its message checks Err and
// never calls Done, so a fast op allocates nothing and starts no timer;
// one that blocks pays for the timer then. Once Done is built, Err is its
// context's, so that Err is non-nil exactly when Done is closed.
//
// An opCtx lives in its op; init and release bracket one run, on the
// goroutine that runs the op. Its methods are safe for concurrent use in
// between.
type opCtx struct {
	parent, group context.Context
	deadline      time.Time
	hint          transport.WaitHint // answers transport.WaitHintKey

	mu    sync.Mutex
	built atomic.Pointer[builtCtx] // nil until Done; set under mu
}

// builtCtx is what Done builds.
type builtCtx struct {
	ctx    context.Context
	cancel context.CancelFunc
	stop   func() bool
}

var _ context.Context = (*opCtx)(nil)

func (c *opCtx) init(parent, group context.Context, deadline time.Time, hint transport.WaitHint) {
	c.parent, c.group, c.deadline, c.hint = parent, group, deadline, hint
}

// release frees what Done built; the context must not be used afterwards.
func (c *opCtx) release() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if b := c.built.Load(); b != nil {
		b.stop()
		b.cancel()
	}
}

func (c *opCtx) Deadline() (time.Time, bool) {
	if d, ok := c.parent.Deadline(); ok && d.Before(c.deadline) {
		return d, true
	}
	return c.deadline, true
}

func (c *opCtx) Value(key any) any {
	if key == (transport.WaitHintKey{}) {
		return c.hint
	}
	return c.parent.Value(key)
}

func (c *opCtx) Err() error {
	if b := c.built.Load(); b != nil {
		return b.ctx.Err()
	}
	if err := c.parent.Err(); err != nil {
		return err
	}
	if c.group.Err() != nil {
		return context.Canceled
	}
	if !time.Now().Before(c.deadline) {
		return context.DeadlineExceeded
	}
	return nil
}

func (c *opCtx) Done() <-chan struct{} {
	if b := c.built.Load(); b != nil {
		return b.ctx.Done()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	b := c.built.Load()
	if b == nil {
		ctx, cancel := context.WithDeadline(c.parent, c.deadline)
		b = &builtCtx{ctx: ctx, cancel: cancel, stop: context.AfterFunc(c.group, cancel)}
		c.built.Store(b)
	}
	return b.ctx.Done()
}
