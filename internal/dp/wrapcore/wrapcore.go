// Package wrapcore is the part of the data-parallel wrappers (ddp, zero,
// fsdp) that does not depend on what is sharded: the gradient hooks and
// their lifetime, the error a hook leaves for the next call, NoSync, the
// checks before Backward and Step, finishing a step's reductions through
// the reducer, the wrap-time check that every rank holds the same model
// (CheckSameModel) and the Join rounds (Round, DecodeJoinRound).
package wrapcore

import (
	"errors"
	"fmt"
	"strings"

	"github.com/cohortml/cohort/autograd"
	"github.com/cohortml/cohort/distributed"
	"github.com/cohortml/cohort/internal/dp/reducer"
	"github.com/cohortml/cohort/nn"
)

// Core is embedded by value in a wrapper's Model (as a named field, so
// that none of its methods join the wrapper's API). Pkg prefixes errors.
type Core struct {
	Pkg    string
	Params []nn.NamedParameter
	Red    *reducer.Reducer
	// Syncless is true inside NoSync.
	Syncless bool

	removes []func()
	closed  bool
	hookErr error
}

// Hook calls ready(i) whenever parameter i's gradient is final, for every
// parameter the reducer tracks.
func (c *Core) Hook(ready func(i int)) {
	for _, i := range c.Red.Tracked() {
		c.removes = append(c.removes, c.Params[i].Param.OnGradReady(func(*autograd.Var) { ready(i) }))
	}
}

// Close removes the gradient hooks. It is idempotent.
func (c *Core) Close() error {
	for _, rm := range c.removes {
		rm()
	}
	c.removes, c.closed = nil, true
	return nil
}

// Usable checks the wrapper may run op: it is not closed, and no hook
// left an error (which it returns, once, disarming the reducer).
func (c *Core) Usable(op string) error {
	if c.closed {
		return fmt.Errorf("%s: %s: model is closed", c.Pkg, op)
	}
	if err := c.TakeErr(); err != nil {
		c.Red.Disarm()
		return err
	}
	return nil
}

// BeginBackward checks that a sharded wrapper's Backward may run: the
// wrapper is usable and a Call armed the reducer (else the error
// notArmed).
func (c *Core) BeginBackward(notArmed string) error {
	if err := c.Usable("Backward"); err != nil {
		return err
	}
	if !c.Red.Armed() {
		return errors.New(notArmed)
	}
	return nil
}

// EndBackward ends Backward after autograd's pass: when the step completed
// inside the last gradient hook it returns the error that hook kept, else
// it completes the step with finish.
func (c *Core) EndBackward(finish func() error) error {
	if !c.Red.Armed() {
		return c.TakeErr()
	}
	return finish()
}

// BeginStep checks that a sharded wrapper's Step may run: the wrapper is
// usable and no backward pass is left unfinished.
func (c *Core) BeginStep() error {
	if err := c.Usable("Step"); err != nil {
		return err
	}
	if c.Red.Armed() {
		return fmt.Errorf("%s: Step: the backward pass was not finished with Backward", c.Pkg)
	}
	return nil
}

// SetErr keeps err for the next call to report, unless one is kept.
func (c *Core) SetErr(err error) {
	if err != nil && c.hookErr == nil {
		c.hookErr = err
	}
}

// TakeErr returns the kept error and forgets it.
func (c *Core) TakeErr() error {
	err := c.hookErr
	c.hookErr = nil
	return err
}

// NoSync runs fn with Syncless set.
func (c *Core) NoSync(fn func() error) error {
	prev := c.Syncless
	c.Syncless = true
	defer func() { c.Syncless = prev }()
	return fn()
}

// Ready hands parameter i's final gradient to the reducer (an error is
// kept for the next call, naming the parameter), and reports whether the
// armed synchronised step has started every bucket, so that the caller
// finishes it inside this last hook.
func (c *Core) Ready(i int) bool {
	err := c.Red.Ready(i)
	switch {
	case errors.Is(err, reducer.ErrNotArmed):
		err = fmt.Errorf("%s: gradient of parameter %q computed by a backward pass that did not start from Model.Call", c.Pkg, c.Params[i].Name)
	case errors.Is(err, reducer.ErrTwice):
		err = fmt.Errorf("%s: parameter %q received its gradient twice in one step", c.Pkg, c.Params[i].Name)
	}
	c.SetErr(err)
	return c.Red.Armed() && c.Red.Syncing() && c.Red.AllStarted()
}

// Finish completes the armed step: it waits for every reduction, runs
// done after they succeeded, and returns the first error: a reduction's,
// a kept hook error, or (unless allowUnused) the parameters that received
// no gradient, by name.
func (c *Core) Finish(allowUnused bool, done func()) error {
	if !c.Red.Syncing() {
		c.Red.Disarm()
		return nil
	}
	unused, takeErr, err := c.Red.Finish()
	if err != nil {
		return err
	}
	if takeErr != nil {
		return takeErr
	}
	if done != nil {
		done()
	}
	if err := c.TakeErr(); err != nil {
		return err
	}
	if len(unused) > 0 && !allowUnused {
		names := make([]string, len(unused))
		for k, i := range unused {
			names[k] = fmt.Sprintf("%q", c.Params[i].Name)
		}
		return fmt.Errorf("%s: Backward: parameters received no gradient in this step: %s (set Options.FindUnusedParameters if some parameters are legitimately unused, or freeze them)", c.Pkg, strings.Join(names, ", "))
	}
	return nil
}

// Reduction is the reducer.Handle of one bucket's collective.
type Reduction struct {
	Work      distributed.Work // nil: nothing in flight (a group of one)
	Pkg, Op   string           // for errors: "zero", "reduce-scatter"
	Bucket, N int              // the bucket and its element count, for errors
	After     func()           // if set, runs once the work is done, error or not
}

var closed = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// Done implements reducer.Handle (without counting as a wait: see
// distributed.Completion).
func (h Reduction) Done() <-chan struct{} {
	if h.Work == nil {
		return closed
	}
	return distributed.Completion(h.Work)
}

// Finish implements reducer.Handle: it waits for the work, runs After and
// returns the work's error naming the bucket.
func (h Reduction) Finish() error {
	var err error
	if h.Work != nil {
		err = h.Work.Wait()
	}
	if h.After != nil {
		h.After()
	}
	if err != nil {
		return fmt.Errorf("%s: bucket %d: %s of %d gradients: %w", h.Pkg, h.Bucket, h.Op, h.N, err)
	}
	return nil
}
