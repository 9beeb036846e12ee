package data

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"iter"
	"math/rand/v2"
	"runtime/debug"
	"sync"
)

// Options configures a Loader. The zero value works: collation on the
// consumer's goroutine with Stack.
type Options struct {
	// Workers is the number of goroutines that fetch and collate batches.
	// Zero collates on the goroutine that ranges over Batches.
	Workers int
	// Prefetch bounds the batches prepared ahead of the one the consumer
	// holds; the loader owns Prefetch+1 batch buffers. Zero means
	// 2·Workers; it is raised to at least Workers. Without workers nothing
	// is prepared ahead.
	Prefetch int
	// Collate builds a batch from its samples; nil means Stack{}.
	Collate Collate
	// Seed seeds the random stream handed to Transform.
	Seed uint64
	// Transform, when set, runs on the worker after collation and may
	// modify the batch in place (augmentation). rng is owned by the worker
	// and re-seeded for each batch from (Seed, epoch, step), so the output
	// does not depend on Workers and a resumed run sees the same numbers.
	Transform func(b *Batch, rng *rand.Rand) error
}

func (o *Options) validate() error {
	if o.Workers < 0 {
		return fmt.Errorf("data: loader: %d workers, want ≥ 0", o.Workers)
	}
	if o.Prefetch < 0 {
		return fmt.Errorf("data: loader: prefetch %d, want ≥ 0", o.Prefetch)
	}
	if o.Prefetch == 0 {
		o.Prefetch = 2 * o.Workers
	}
	if o.Workers > 0 && o.Prefetch < o.Workers {
		o.Prefetch = o.Workers // fewer buffers than workers would idle workers
	}
	if o.Collate == nil {
		o.Collate = Stack{}
	}
	return nil
}

// State is a Loader's position: the batches of Epoch before Position have
// been handed out. Seed is the loader's Transform seed, and Plan a
// fingerprint of the epoch's batch plan (the sampler's configuration), so
// a state is only restored into a loader that would produce the same
// batches.
type State struct {
	Seed     uint64 `json:"seed"`
	Epoch    int    `json:"epoch"`
	Position int    `json:"position"`
	Plan     uint64 `json:"plan"`
}

// Loader yields the batches of a BatchSampler's plan, fetched from a
// Dataset and collated by worker goroutines, in plan order.
//
// The batches are identical for any number of workers. A Loader is used by
// one goroutine at a time.
type Loader struct {
	ds    Dataset
	bs    BatchSampler
	opts  Options
	epoch int
	pos   int
	loop  loopGuard
	bufs  []*Batch // reused across epochs; Prefetch+1 with workers, else 1

	fpOK    bool // fp holds the plan fingerprint of fpEpoch
	fpEpoch int
	fp      uint64
}

// NewLoader returns a Loader over ds whose batches follow bs.
func NewLoader(ds Dataset, bs BatchSampler, opts Options) (*Loader, error) {
	if ds == nil || bs == nil {
		return nil, errors.New("data: loader: nil dataset or batch sampler")
	}
	if err := opts.validate(); err != nil {
		return nil, err
	}
	return &Loader{ds: ds, bs: bs, opts: opts}, nil
}

// NumBatches returns the number of batches per epoch.
func (l *Loader) NumBatches() int { return l.bs.NumBatches() }

// SetEpoch selects the epoch the next Batches call runs, from its start.
func (l *Loader) SetEpoch(epoch int) { l.epoch, l.pos = epoch, 0 }

// Epoch returns the epoch the next Batches call runs.
func (l *Loader) Epoch() int { return l.epoch }

// State returns the loader's position. Called inside the loop body of
// Batches it counts the batch being processed as consumed, so restoring it
// continues with the next batch.
func (l *Loader) State() State {
	return State{Seed: l.opts.Seed, Epoch: l.epoch, Position: l.pos, Plan: l.fingerprint(l.epoch)}
}

// Restore moves the loader to a saved State; the next Batches call yields
// exactly the batches an uninterrupted run would have yielded after it. It
// fails when the state does not fit this loader: another seed, another
// batch plan (sampler, seed, world size or dataset length changed) or a
// position outside the epoch. A state at the end of an epoch restores as
// the start of the next one.
func (l *Loader) Restore(s State) error {
	if s.Seed != l.opts.Seed {
		return fmt.Errorf("data: loader: restore: state seed %d, loader seed %d", s.Seed, l.opts.Seed)
	}
	n := l.bs.NumBatches()
	if s.Epoch < 0 || s.Position < 0 || s.Position > n {
		return fmt.Errorf("data: loader: restore: epoch %d position %d outside the %d batches of an epoch", s.Epoch, s.Position, n)
	}
	if f := l.fingerprint(s.Epoch); s.Plan != f {
		return fmt.Errorf("data: loader: restore: the state's batch plan (fingerprint %016x) differs from this loader's for epoch %d (%016x): sampler configuration changed", s.Plan, s.Epoch, f)
	}
	l.epoch, l.pos = s.Epoch, s.Position
	if l.pos == n {
		l.epoch, l.pos = l.epoch+1, 0
	}
	return nil
}

// fingerprint hashes the batch plan of epoch (cached for the last epoch
// asked).
func (l *Loader) fingerprint(epoch int) uint64 {
	if l.fpOK && epoch == l.fpEpoch {
		return l.fp
	}
	h := fnv.New64a()
	var b [8]byte
	put := func(v int) {
		for i := range b {
			b[i] = byte(uint64(v) >> (8 * i))
		}
		h.Write(b[:])
	}
	put(l.ds.Len())
	for _, batch := range l.bs.Batches(epoch) {
		put(len(batch))
		for _, i := range batch {
			put(i)
		}
	}
	l.fpOK, l.fpEpoch, l.fp = true, epoch, h.Sum64()
	return l.fp
}

// loopGuard lets one Batches loop of a loader run at a time.
type loopGuard struct{ busy bool }

// enter starts a loop; when one is running already it yields an error
// with msg instead and returns false.
func (g *loopGuard) enter(yield func(*Batch, error) bool, msg string) bool {
	if g.busy {
		yield(nil, errors.New(msg))
		return false
	}
	g.busy = true
	return true
}

// exit ends the loop enter started.
func (g *loopGuard) exit() { g.busy = false }

// Batches iterates over the remaining batches of the current epoch (all of
// them after SetEpoch). When the last batch has been consumed the loader
// moves to the next epoch, so ranging over Batches once per epoch walks
// the epochs in turn.
//
// Each batch is valid until the loop body returns. An error — a sample
// that fails to load or collate (the error names the epoch, the step and
// the dataset index), or ctx ending — is yielded once with a nil batch and
// ends the iteration. Breaking out of the loop or cancelling ctx stops the
// workers; Batches returns only after they have exited.
func (l *Loader) Batches(ctx context.Context) iter.Seq2[*Batch, error] {
	return func(yield func(*Batch, error) bool) {
		if !l.loop.enter(yield, "data: loader: Batches is already running (a Loader serves one loop at a time)") {
			return
		}
		defer l.loop.exit()
		plan := l.bs.Batches(l.epoch)
		if l.pos > len(plan) {
			yield(nil, fmt.Errorf("data: loader: position %d beyond the %d batches of epoch %d", l.pos, len(plan), l.epoch))
			return
		}
		var done bool
		if l.opts.Workers == 0 {
			done = l.runInline(ctx, plan, yield)
		} else {
			done = l.runWorkers(ctx, plan, yield)
		}
		if done {
			l.epoch, l.pos = l.epoch+1, 0
		}
	}
}

// worker is the per-goroutine state of batch production.
type worker struct {
	pcg *rand.PCG
	rng *rand.Rand
}

func newWorker() *worker {
	p := rand.NewPCG(0, 0)
	return &worker{pcg: p, rng: rand.New(p)}
}

func (l *Loader) buffers() []*Batch {
	n := 1
	if l.opts.Workers > 0 {
		n = l.opts.Prefetch + 1
	}
	for len(l.bufs) < n {
		l.bufs = append(l.bufs, &Batch{})
	}
	return l.bufs[:n]
}

// runInline produces every batch on the consumer's goroutine. It reports
// whether the epoch ran to its end.
func (l *Loader) runInline(ctx context.Context, plan [][]int, yield func(*Batch, error) bool) bool {
	b, w := l.buffers()[0], newWorker()
	for k := l.pos; k < len(plan); k++ {
		if err := ctx.Err(); err != nil {
			yield(nil, fmt.Errorf("data: loader: epoch %d step %d: %w", l.epoch, k, err))
			return false
		}
		if err := l.produce(w, b, l.epoch, k, plan[k]); err != nil {
			yield(nil, err)
			return false
		}
		l.pos = k + 1
		if !yield(b, nil) {
			return false
		}
	}
	return true
}

type job struct {
	step int
	b    *Batch
}

type result struct {
	b   *Batch
	err error
}

// runWorkers runs the pipeline: a dispatcher hands (step, free buffer)
// jobs to Workers goroutines in step order; a worker's result for step k
// goes to slot k mod P. At most P = len(buffers) steps are in flight (a
// buffer returns to the free list only after the consumer is done with
// it), so the steps in flight are P consecutive numbers and their slots
// are distinct: a slot (capacity 1) never blocks its writer.
func (l *Loader) runWorkers(ctx context.Context, plan [][]int, yield func(*Batch, error) bool) bool {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
	}()
	bufs := l.buffers()
	P, epoch, start := len(bufs), l.epoch, l.pos
	free := make(chan *Batch, P)
	for _, b := range bufs {
		free <- b
	}
	slots := make([]chan result, P)
	for i := range slots {
		slots[i] = make(chan result, 1)
	}
	jobs := make(chan job)

	wg.Add(1)
	go func() { // dispatcher
		defer wg.Done()
		defer close(jobs)
		for k := start; k < len(plan); k++ {
			var b *Batch
			select {
			case b = <-free:
			case <-ctx.Done():
				return
			}
			select {
			case jobs <- job{k, b}:
			case <-ctx.Done():
				return
			}
		}
	}()
	for range l.opts.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w := newWorker()
			for {
				select {
				case j, ok := <-jobs:
					if !ok {
						return
					}
					err := l.produce(w, j.b, epoch, j.step, plan[j.step])
					slots[j.step%P] <- result{j.b, err}
				case <-ctx.Done():
					return
				}
			}
		}()
	}

	for k := start; k < len(plan); k++ {
		if err := ctx.Err(); err != nil { // a result may be ready too: cancellation wins
			yield(nil, fmt.Errorf("data: loader: epoch %d step %d: %w", epoch, k, context.Cause(ctx)))
			return false
		}
		var r result
		select {
		case r = <-slots[k%P]:
		case <-ctx.Done():
			yield(nil, fmt.Errorf("data: loader: epoch %d step %d: %w", epoch, k, context.Cause(ctx)))
			return false
		}
		if r.err != nil {
			yield(nil, r.err)
			return false
		}
		l.pos = k + 1
		if !yield(r.b, nil) {
			return false
		}
		free <- r.b // capacity P: never blocks
	}
	return true
}

// produce fetches and collates step k of epoch into b. A panic in the
// dataset, the collate or the transform becomes an error.
func (l *Loader) produce(w *worker, b *Batch, epoch, k int, idx []int) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("data: loader: epoch %d step %d: panic: %v\n%s", epoch, k, r, debug.Stack())
		}
	}()
	n := l.ds.Len()
	if cap(b.samples) < len(idx) {
		b.samples = make([]Sample, len(idx))
	}
	samples := b.samples[:len(idx)]
	for j, i := range idx {
		if i < 0 || i >= n {
			return fmt.Errorf("data: loader: epoch %d step %d: sample index %d out of range [0, %d) (sampler built for another dataset?)", epoch, k, i, n)
		}
		s, err := l.ds.Get(i)
		if err != nil {
			return fmt.Errorf("data: loader: epoch %d step %d: sample %d: %w", epoch, k, i, err)
		}
		samples[j] = s
	}
	b.Indices = append(b.Indices[:0], idx...)
	return finish(&l.opts, w, b, samples, epoch, k)
}

// finish collates samples (whose indices are in b.Indices) into b and runs
// the transform.
func finish(o *Options, w *worker, b *Batch, samples []Sample, epoch, k int) error {
	b.Epoch, b.Step = epoch, k
	err := o.Collate.Collate(b, samples, b.Indices)
	clear(samples) // drop references into the dataset
	if err != nil {
		return fmt.Errorf("data: loader: epoch %d step %d: %w", epoch, k, err)
	}
	if o.Transform != nil {
		w.pcg.Seed(mix(o.Seed, uint64(epoch)), uint64(k))
		if err := o.Transform(b, w.rng); err != nil {
			return fmt.Errorf("data: loader: epoch %d step %d: transform: %w", epoch, k, err)
		}
	}
	return nil
}

// mix combines two words into a well-spread seed (SplitMix64 finaliser).
func mix(a, b uint64) uint64 {
	z := a ^ (b+0x9e3779b97f4a7c15)*0xbf58476d1ce4e5b9
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}
