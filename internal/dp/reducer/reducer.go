package reducer

import (
	"errors"
	"fmt"
	"time"
)

// Handle is one bucket's reduction in flight.
type Handle interface {
	// Done is closed when the communication Start issued has completed.
	// The Reducer only checks it without blocking (Poll, for the step's
	// timings), so asking for it must not count as waiting for the
	// communication (distributed.Completion): a reduction launched during
	// backward is not polled for by the transport until Finish waits.
	Done() <-chan struct{}
	// Finish waits for the communication and completes the reduction. The
	// Reducer calls it exactly once per started bucket, in bucket order.
	Finish() error
}

// IO is what a Reducer asks its owner to do. Every method is called on
// the goroutine driving the Reducer.
type IO interface {
	// Take brings parameter i's gradient into its bucket. used is false
	// when the parameter received no gradient in this step and Finish is
	// filling it in (the owner then contributes zeros).
	Take(i int, used bool) error
	// Start begins reducing bucket k, all of whose parameters have been
	// taken, and returns at once.
	Start(k int) Handle
	// Agree returns the order every rank rebuilds its buckets in, given
	// this rank's order (every tracked parameter once, those that became
	// ready first in the order they did). Ranks typically broadcast one
	// rank's order.
	Agree(order []int) ([]int, error)
	// Replan lays the buckets out again for the agreed order and returns
	// each bucket's parameters, in order. The owner moves its buffers
	// over; the Reducer adopts the new buckets.
	Replan(order []int) ([][]int, error)
}

// Observer is an optional interface of an IO: Seen(k) is called once per
// started bucket, when its communication is seen complete (the moment
// Times(k) reports as done), on the goroutine driving the Reducer. Owners
// use it to close a trace span per bucket.
type Observer interface {
	Seen(k int)
}

// ErrNotArmed is wrapped by Ready for a gradient that arrives outside a
// step (a backward pass that did not start from the wrapper's Forward).
var ErrNotArmed = errors.New("reducer: gradient outside a step")

// ErrTwice is wrapped by Ready for a parameter made ready twice in one step.
var ErrTwice = errors.New("reducer: gradient ready twice in one step")

// Reducer is the bucket state machine of one wrapper on one rank.
type Reducer struct {
	io       IO
	obs      Observer // io, when it is one
	nparams  int
	buckets  [][]int
	bucketOf []int // bucket of each parameter, -1 for untracked
	tracked  []int // parameters in some bucket, ascending

	// The current step.
	armed, syncing, shadow, anyReady bool
	ready                            []bool
	pending                          []int // per bucket: parameters not yet taken
	next                             int   // first bucket not started
	handles                          []Handle
	launched, done                   []time.Time

	rebuilt  bool
	synced   bool  // a synchronised step has finished
	observed []int // ready order of the first synchronised step
}

// New returns a Reducer over nparams parameters laid out in buckets
// (each parameter in at most one bucket; parameters in none are not
// tracked). The buckets are rebuilt after the first synchronised step
// unless noRebuild is set.
func New(nparams int, buckets [][]int, io IO, noRebuild bool) (*Reducer, error) {
	if io == nil {
		return nil, errors.New("reducer: New: nil IO")
	}
	r := &Reducer{io: io, nparams: nparams, ready: make([]bool, nparams), rebuilt: noRebuild}
	r.obs, _ = io.(Observer)
	if err := r.adopt(buckets); err != nil {
		return nil, err
	}
	return r, nil
}

// adopt installs a bucket layout, checking it.
func (r *Reducer) adopt(buckets [][]int) error {
	bucketOf := make([]int, r.nparams)
	for i := range bucketOf {
		bucketOf[i] = -1
	}
	var tracked []int
	for k, b := range buckets {
		for _, i := range b {
			if i < 0 || i >= r.nparams {
				return fmt.Errorf("reducer: bucket %d names parameter %d of %d", k, i, r.nparams)
			}
			if bucketOf[i] >= 0 {
				return fmt.Errorf("reducer: parameter %d is in buckets %d and %d", i, bucketOf[i], k)
			}
			bucketOf[i] = k
		}
	}
	for i, k := range bucketOf {
		if k >= 0 {
			tracked = append(tracked, i)
		}
	}
	if r.tracked != nil && len(tracked) != len(r.tracked) {
		return fmt.Errorf("reducer: new layout tracks %d parameters, the old one %d", len(tracked), len(r.tracked))
	}
	r.buckets, r.bucketOf, r.tracked = buckets, bucketOf, tracked
	r.pending = make([]int, len(buckets))
	r.handles = make([]Handle, len(buckets))
	r.launched = make([]time.Time, len(buckets))
	r.done = make([]time.Time, len(buckets))
	return nil
}

// Buckets returns the current layout (do not modify it).
func (r *Reducer) Buckets() [][]int { return r.buckets }

// BucketOf returns parameter i's bucket, or -1.
func (r *Reducer) BucketOf(i int) int { return r.bucketOf[i] }

// Tracked returns the parameters in some bucket, ascending.
func (r *Reducer) Tracked() []int { return r.tracked }

// Rebuilt reports whether the one-time rebuild has happened.
func (r *Reducer) Rebuilt() bool { return r.rebuilt }

// Arm prepares one backward pass: sync selects whether gradients are
// reduced in it (false under NoSync); shadow marks a step whose gradients
// are zeros contributed by a rank that has no data (Join).
func (r *Reducer) Arm(sync, shadow bool) {
	r.armed, r.syncing, r.shadow, r.anyReady = true, sync, shadow, false
	clear(r.ready)
	for k, b := range r.buckets {
		r.pending[k] = len(b)
		r.handles[k] = nil
		r.launched[k], r.done[k] = time.Time{}, time.Time{}
	}
	r.next = 0
}

// Disarm abandons the armed step without communicating (after an error
// reported to the caller, or when a rank leaves its training loop).
func (r *Reducer) Disarm() { r.armed = false }

// Armed reports whether a step is armed.
func (r *Reducer) Armed() bool { return r.armed }

// Syncing reports whether the armed step reduces gradients.
func (r *Reducer) Syncing() bool { return r.syncing }

// InFlight reports whether a synchronised step has started reducing
// (some gradient became ready) and has not been finished.
func (r *Reducer) InFlight() bool { return r.armed && r.syncing && r.anyReady }

// Ready records that parameter i's gradient is final for this step, takes
// it into its bucket and starts, in order, every bucket that is now full.
// It does nothing in an unsynchronised step or for an untracked parameter.
// The returned error wraps ErrNotArmed or ErrTwice, or is Take's; the
// state machine stays consistent either way.
func (r *Reducer) Ready(i int) error {
	if !r.armed {
		return ErrNotArmed
	}
	if !r.syncing || i < 0 || i >= r.nparams || r.bucketOf[i] < 0 {
		return nil
	}
	if r.ready[i] {
		return ErrTwice
	}
	r.ready[i] = true
	r.anyReady = true
	if !r.rebuilt {
		r.observed = append(r.observed, i)
	}
	err := r.io.Take(i, true)
	r.pending[r.bucketOf[i]]--
	r.launch()
	r.Poll(time.Now())
	return err
}

// StartAll starts every bucket not yet started, as if every parameter
// were ready, without taking any gradient (a shadow step: the owner has
// zeroed the buckets).
func (r *Reducer) StartAll() {
	for k := range r.pending {
		r.pending[k] = 0
	}
	r.launch()
}

// launch starts, in plan order, every bucket whose parameters are all taken.
func (r *Reducer) launch() {
	for r.next < len(r.buckets) && r.pending[r.next] == 0 {
		k := r.next
		r.launched[k] = time.Now()
		r.handles[k] = r.io.Start(k)
		r.next++
	}
}

// Poll stamps the started buckets whose communication has completed.
func (r *Reducer) Poll(now time.Time) {
	for k := range r.next {
		if !r.done[k].IsZero() {
			continue
		}
		select {
		case <-r.handles[k].Done():
			r.done[k] = now
			r.seen(k)
		default:
		}
	}
}

// Finish completes the armed step after autograd's backward returned. In a
// synchronised step that is not a shadow step, it takes the tracked
// parameters that never became ready (used=false) and returns them in
// ascending order; it then starts the remaining buckets and finishes every
// bucket in order, even after an error, so that every rank issues the
// same collectives. takeErr is the first Take error, reduceErr the first
// Handle.Finish error. An unsynchronised step finishes at once.
func (r *Reducer) Finish() (unused []int, takeErr, reduceErr error) {
	r.armed = false
	if !r.syncing {
		return nil, nil, nil
	}
	r.synced = true
	if !r.shadow {
		for _, i := range r.tracked {
			if r.ready[i] {
				continue
			}
			unused = append(unused, i)
			if e := r.io.Take(i, false); e != nil && takeErr == nil {
				takeErr = e
			}
			r.pending[r.bucketOf[i]]--
		}
		r.launch()
	}
	for k := range r.buckets {
		if r.handles[k] == nil {
			continue // cannot happen: every bucket has been started
		}
		r.Poll(time.Now()) // stamp what completed while earlier buckets finished
		if e := r.handles[k].Finish(); e != nil && reduceErr == nil {
			reduceErr = e
		}
		if r.done[k].IsZero() {
			r.done[k] = time.Now()
			r.seen(k)
		}
	}
	return unused, takeErr, reduceErr
}

// seen tells an Observer IO that bucket k's communication is done.
func (r *Reducer) seen(k int) {
	if r.obs != nil {
		r.obs.Seen(k)
	}
}

// AllStarted reports whether every bucket of the armed step has started:
// every tracked parameter's gradient is in, and Finish will not take any.
func (r *Reducer) AllStarted() bool { return r.next == len(r.buckets) }

// Times returns when bucket k's reduction started and when it was seen
// complete in the last step.
func (r *Reducer) Times(k int) (launched, done time.Time) { return r.launched[k], r.done[k] }

// Rebuild re-plans the buckets after the first synchronised step: it
// completes this rank's observed ready order with the parameters that
// never became ready (in reverse index order), asks Agree for the common
// order, checks it and hands it to Replan. It does nothing before the
// first synchronised step has finished, and once rebuilt.
func (r *Reducer) Rebuild() error {
	if r.rebuilt || !r.synced {
		return nil
	}
	want := make([]int, 0, len(r.tracked))
	for k := len(r.tracked) - 1; k >= 0; k-- {
		want = append(want, r.tracked[k])
	}
	order, err := r.io.Agree(CompleteOrder(r.observed, want))
	if err != nil {
		return err
	}
	seen := make(map[int]bool, len(order))
	for _, i := range order {
		if i < 0 || i >= r.nparams || r.bucketOf[i] < 0 || seen[i] {
			return fmt.Errorf("reducer: agreed order %v names parameter %d, not a tracked parameter here or named twice", order, i)
		}
		seen[i] = true
	}
	if len(order) != len(r.tracked) {
		return fmt.Errorf("reducer: agreed order lists %d parameters, %d are tracked here", len(order), len(r.tracked))
	}
	buckets, err := r.io.Replan(order)
	if err != nil {
		return err
	}
	if err := r.adopt(buckets); err != nil {
		return err
	}
	r.rebuilt, r.observed = true, nil
	return nil
}

// CompleteOrder returns observed followed by the indices of want that
// observed lacks, in want's order: the rebuilt order when some parameters
// never became ready (unused parameters go last).
func CompleteOrder(observed, want []int) []int {
	seen := make(map[int]bool, len(observed))
	out := make([]int, 0, len(want))
	for _, i := range observed {
		seen[i] = true
		out = append(out, i)
	}
	for _, i := range want {
		if !seen[i] {
			out = append(out, i)
		}
	}
	return out
}
