package transport

import "context"

// A WaitHint says whether a caller is blocked waiting for the operation
// whose sends and receives run under a context. An operation posted
// ahead (a pipeline's receive of the next activation, DDP's all-reduce of
// a bucket launched during backward) runs on a goroutine of its own while
// its caller computes; a transport that polls for a while before sleeping
// (shm) only takes a CPU from that computation, or from another rank's,
// if it polls for such an operation. So it asks the hint before polling
// and sleeps at once while nobody waits; Waited may turn true at any time
// (the caller reached Wait).
type WaitHint interface {
	Waited() bool
}

// WaitHintKey is the context key under which a WaitHint is found.
type WaitHintKey struct{}

// WithWaitHint returns ctx carrying h.
func WithWaitHint(ctx context.Context, h WaitHint) context.Context {
	return context.WithValue(ctx, WaitHintKey{}, h)
}

// Awaited reports whether a caller waits for the operation ctx belongs
// to: what its WaitHint says, or true when it carries none.
func Awaited(ctx context.Context) bool {
	if h, ok := ctx.Value(WaitHintKey{}).(WaitHint); ok {
		return h.Waited()
	}
	return true
}
