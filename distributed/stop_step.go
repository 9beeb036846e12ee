package distributed

import (
	"context"
	"fmt"
)

// AfterStep ends step number step of a training loop that saves
// checkpoints into dir ("" for none) by calling save: save runs when due
// (the loop's checkpoint interval) and, if it did not, when the job stops
// (ShouldStop). When the job stops it returns an error wrapping the
// *Stopped that says where the state went: "… after step N; checkpoint
// saved in DIR", or without dir "… no checkpoint without -checkpoint-dir"
// (the flag cohort's programs share). Every rank of pg calls it at the
// same point of each step; s may be nil (the job never stops early).
func (s *Stopper) AfterStep(ctx context.Context, pg ProcessGroup, step int, dir string, due bool, save func() error) error {
	saved := due && dir != ""
	if saved {
		if err := save(); err != nil {
			return err
		}
	}
	if halt, err := s.ShouldStop(ctx, pg); err != nil || !halt {
		return err
	}
	if dir == "" {
		return fmt.Errorf("%w after step %d; no checkpoint without -checkpoint-dir", s.Err(), step)
	}
	if !saved {
		if err := save(); err != nil {
			return err
		}
	}
	return fmt.Errorf("%w after step %d; checkpoint saved in %s", s.Err(), step, dir)
}
