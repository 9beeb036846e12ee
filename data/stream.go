package data

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"sync"
)

// StreamLoader batches an IterableDataset in stream order: consecutive
// samples form a batch. One pass over the stream is one epoch.
//
// The stream is read by a single goroutine (with Workers > 0, a producer
// goroutine that collates up to Prefetch batches ahead; with Workers == 0,
// the consumer's). Samples must stay unmodified once yielded: the batch is
// collated after its last sample arrives. Batch.Indices holds each
// sample's ordinal in the stream.
type StreamLoader struct {
	ds        IterableDataset
	batchSize int
	dropLast  bool
	opts      Options
	epoch     int
	pos       int
	loop      loopGuard
	bufs      []*Batch
}

// NewStreamLoader returns a StreamLoader cutting ds into batches of
// batchSize (the last one smaller, or dropped with dropLast).
func NewStreamLoader(ds IterableDataset, batchSize int, dropLast bool, opts Options) (*StreamLoader, error) {
	if ds == nil {
		return nil, errors.New("data: stream loader: nil dataset")
	}
	if batchSize < 1 {
		return nil, fmt.Errorf("data: stream loader: batch size %d, want ≥ 1", batchSize)
	}
	if err := opts.validate(); err != nil {
		return nil, err
	}
	return &StreamLoader{ds: ds, batchSize: batchSize, dropLast: dropLast, opts: opts}, nil
}

// SetEpoch selects the epoch of the next pass, from its start.
func (l *StreamLoader) SetEpoch(epoch int) { l.epoch, l.pos = epoch, 0 }

// State returns the loader's position (Plan is zero: a stream has no plan).
func (l *StreamLoader) State() State {
	return State{Seed: l.opts.Seed, Epoch: l.epoch, Position: l.pos}
}

// Restore moves the loader to a saved State. The next pass skips the
// first Position·batchSize samples of the stream, so resuming is exact
// when the stream yields the same samples on every pass.
func (l *StreamLoader) Restore(s State) error {
	if s.Seed != l.opts.Seed {
		return fmt.Errorf("data: stream loader: restore: state seed %d, loader seed %d", s.Seed, l.opts.Seed)
	}
	if s.Epoch < 0 || s.Position < 0 || s.Plan != 0 {
		return fmt.Errorf("data: stream loader: restore: bad state %+v", s)
	}
	l.epoch, l.pos = s.Epoch, s.Position
	return nil
}

// Batches iterates over the rest of the current pass; see Loader.Batches
// for the contract. At the end of the stream the loader moves to the next
// epoch.
func (l *StreamLoader) Batches(ctx context.Context) iter.Seq2[*Batch, error] {
	return func(yield func(*Batch, error) bool) {
		if !l.loop.enter(yield, "data: stream loader: Batches is already running") {
			return
		}
		defer l.loop.exit()
		n := max(l.opts.Prefetch, 1) + 1
		for len(l.bufs) < n {
			l.bufs = append(l.bufs, &Batch{})
		}
		var done bool
		if l.opts.Workers == 0 {
			b0 := l.bufs[0]
			done = l.run(ctx, func() (*Batch, bool) { return b0, true }, func(b *Batch) bool {
				l.pos = b.Step + 1
				return yield(b, nil)
			}, func(err error) { yield(nil, err) })
		} else {
			done = l.runAsync(ctx, yield)
		}
		if done {
			l.epoch, l.pos = l.epoch+1, 0
		}
	}
}

// runAsync runs the stream on a producer goroutine feeding a bounded
// queue.
func (l *StreamLoader) runAsync(ctx context.Context, yield func(*Batch, error) bool) bool {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
	}()
	P := len(l.bufs) - 1
	free := make(chan *Batch, P+1)
	for _, b := range l.bufs {
		free <- b
	}
	out := make(chan result, P)
	var producerDone bool
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(out)
		acquire := func() (*Batch, bool) {
			select {
			case b := <-free:
				return b, true
			case <-ctx.Done():
				return nil, false
			}
		}
		producerDone = l.run(ctx, acquire, func(b *Batch) bool {
			select {
			case out <- result{b: b}:
				return true
			case <-ctx.Done():
				return false
			}
		}, func(err error) {
			select {
			case out <- result{err: err}:
			case <-ctx.Done():
			}
		})
	}()
	var prev *Batch
	for {
		if err := ctx.Err(); err != nil { // cancellation wins over a ready batch
			yield(nil, fmt.Errorf("data: stream loader: epoch %d step %d: %w", l.epoch, l.pos, context.Cause(ctx)))
			return false
		}
		var r result
		var ok bool
		select {
		case r, ok = <-out:
		case <-ctx.Done():
			yield(nil, fmt.Errorf("data: stream loader: epoch %d step %d: %w", l.epoch, l.pos, context.Cause(ctx)))
			return false
		}
		if prev != nil {
			free <- prev // the consumer is done with the previous batch
			prev = nil
		}
		if !ok {
			wg.Wait()
			return producerDone
		}
		if r.err != nil {
			yield(nil, r.err)
			return false
		}
		l.pos = r.b.Step + 1
		if !yield(r.b, nil) {
			return false
		}
		prev = r.b
	}
}

// run reads one pass, skipping the batches before l.pos, collates each
// batch into a buffer from acquire and hands it to emit (which reports
// whether to go on). It reports whether the stream ended normally.
func (l *StreamLoader) run(ctx context.Context, acquire func() (*Batch, bool), emit func(*Batch) bool, fail func(error)) bool {
	epoch, step := l.epoch, l.pos
	skip := step * l.batchSize
	w := newWorker()
	ordinal := 0
	var samples []Sample
	flush := func() bool {
		b, ok := acquire()
		if !ok {
			return false
		}
		b.samples = append(b.samples[:0], samples...)
		b.Indices = b.Indices[:0]
		for i := range samples {
			b.Indices = append(b.Indices, ordinal-len(samples)+i)
		}
		if err := finish(&l.opts, w, b, b.samples, epoch, step); err != nil {
			fail(err)
			return false
		}
		samples = samples[:0]
		step++
		return emit(b)
	}
	for s, err := range l.ds.Iter(ctx) {
		if err != nil {
			fail(fmt.Errorf("data: stream loader: epoch %d step %d: sample %d: %w", epoch, step, ordinal, err))
			return false
		}
		if err := ctx.Err(); err != nil {
			fail(fmt.Errorf("data: stream loader: epoch %d step %d: %w", epoch, step, err))
			return false
		}
		ordinal++
		if ordinal <= skip {
			continue
		}
		samples = append(samples, s)
		if len(samples) == l.batchSize && !flush() {
			return false
		}
	}
	if err := ctx.Err(); err != nil {
		fail(fmt.Errorf("data: stream loader: epoch %d step %d: %w", epoch, step, err))
		return false
	}
	if len(samples) > 0 && !l.dropLast {
		return flush()
	}
	return true
}
