package nccl

import (
	"context"
	"fmt"
	"time"

	"github.com/cohortml/cohort/distributed"
	"github.com/cohortml/cohort/distributed/flight"
	"github.com/cohortml/cohort/distributed/store"
)

// The watchdog names the rank a hung op waits for, as the native
// backend's does (and with the same keys and diagnosis, package flight):
// every rank of a watched group publishes its flight ring under
// <prefix>/flight/<group id>/<group rank> every Interval/4; when an op
// has run for Interval, the rank reads every rank's last ring, diagnoses
// and, if it is the first to claim the op in the store, logs one line
// naming the rank that never entered it. It aborts nothing itself: the
// op's deadline does (group.await).

// heartbeatOps is how many ops a heartbeat carries.
const heartbeatOps = 16

type watchdog struct {
	g      *group
	st     store.Store
	prefix string
	opts   distributed.WatchdogOptions
}

// Watch implements distributed.Watch.
func (g *group) Watch(st store.Store, prefix string, opts distributed.WatchdogOptions) error {
	if st == nil {
		return fmt.Errorf("distributed: Watch: rank %d: no store", g.me)
	}
	g.watch(st, prefix, opts)
	return nil
}

func (g *group) watch(st store.Store, prefix string, opts distributed.WatchdogOptions) {
	opts, on := opts.Resolved()
	if !on || st == nil {
		return
	}
	g.mu.Lock()
	if g.wd != nil || g.closed {
		g.mu.Unlock()
		return
	}
	g.wd = &watchdog{g: g, st: st, prefix: prefix, opts: opts}
	g.mu.Unlock()
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		g.wd.loop()
	}()
}

func (w *watchdog) key(rank int) string {
	return fmt.Sprintf("%s/flight/%d/%d", w.prefix, w.g.id, rank)
}

func (w *watchdog) tick() time.Duration { return max(w.opts.Interval/4, 10*time.Millisecond) }

func (w *watchdog) loop() {
	g := w.g
	defer flight.Survive(w.opts.Log, g.me)
	var reported uint64
	flight.Every(g.ctx, w.tick(), func() {
		w.publish()
		w.check(&reported)
	})
}

func (w *watchdog) snapshot(n int) flight.Snapshot {
	s := w.g.Flight()
	if len(s.Records) > n {
		s.Records = s.Records[len(s.Records)-n:]
	}
	return s
}

func (w *watchdog) publish() {
	flight.Publish(w.g.ctx, w.st, w.key(w.g.rank), w.snapshot(heartbeatOps), w.tick())
}

func (w *watchdog) check(reported *uint64) {
	g := w.g
	now := time.Now()
	mine := w.snapshot(ringSize)
	op, ok := mine.Stuck(now, w.opts.Interval)
	if !ok || op.Seq == *reported {
		return
	}
	*reported = op.Seq
	ctx, cancel := context.WithTimeout(g.ctx, max(w.tick(), time.Second))
	defer cancel()
	snaps := flight.Collect(ctx, w.st, w.key, g.ranks, g.rank, mine)
	d := flight.Diagnose(time.Now(), op, g.rank, snaps, g.ranks)
	if !flight.Claim(ctx, w.st, w.prefix, g.id, op.Seq, g.me) || g.ctx.Err() != nil {
		return
	}
	w.opts.Tell(g.me, d)
}
