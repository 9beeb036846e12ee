package distributed

import (
	"context"
	"os"
	"time"
)

// NewTestStopper is a Stopper fed by HandleSignal instead of the
// process's signals; exit receives the status of a second signal.
func NewTestStopper(parent context.Context, exit func(int)) *Stopper {
	return newStopper(parent, nil, func() {}, exit)
}

// HandleSignal delivers sig to s as if the process had received it, and
// returns once s has taken it in.
func (s *Stopper) HandleSignal(sig os.Signal) {
	if code, now := s.handle(sig, time.Now()); now {
		s.exit(code)
	}
}
