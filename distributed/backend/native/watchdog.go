package native

import (
	"context"
	"fmt"
	"time"

	"github.com/cohortml/cohort/distributed"
	"github.com/cohortml/cohort/distributed/flight"
	"github.com/cohortml/cohort/distributed/store"
)

// The watchdog names the rank a hung op waits for, long before the group
// timeout ends the job.
//
// Every rank of a watched group publishes its flight ring (the last
// flightHeartbeatOps ops and its op counts) under
// <prefix>/flight/<group id>/<group rank> as a heartbeat: at most once per
// poll (a second; see poll) when the ring has changed, and
// every Interval/4 whatever happens. A rank that stops (SIGSTOP, a
// debugger, a dead host) leaves its last ring in the store, at most a poll
// behind what it did, and its age tells that it stopped: a rank that
// trained for a few seconds between two Interval/4 beats and then stopped
// is still named with its last op, not as one that never ran one. A rank
// spinning in user code still publishes (the Go scheduler preempts the
// spin). Each rank checks its own ring every poll; when an op has run for
// Interval, it reads every rank's last ring, diagnoses (package flight)
// and, if it is the first rank to claim
// <prefix>/flight/<group id>/reported/<seq> in the store, logs one line
// such as
//
//	dist: watchdog: rank 0: allreduce #1580 (at main.train) is stuck: rank 1 never entered it (its last: broadcast #1579 at main.train, done 61s ago; 1579 ops issued, 1579 finished); ranks 0,2,3 waiting in it for 61s
//
// It never aborts anything: the op still ends at the group timeout (or
// succeeds if the missing rank comes back). Store traffic: one Set of
// about 2 KB per rank and group a second while the group runs ops (at
// most ~256 a second per group in larger groups; every Interval/4, 15 s
// by default, when idle); a diagnosis reads one key per rank.

// Watch implements distributed.Watch: it starts g's watchdog (see above),
// publishing through st under prefix.
func (g *group) Watch(st store.Store, prefix string, opts distributed.WatchdogOptions) error {
	if st == nil {
		return fmt.Errorf("distributed: Watch: rank %d: no store", g.me)
	}
	g.watch(st, prefix, opts)
	return nil
}

// watchdog is one group's.
type watchdog struct {
	g      *group
	st     store.Store
	prefix string
	opts   distributed.WatchdogOptions
}

// watch starts g's watchdog unless it has one or opts turn it off.
func (g *group) watch(st store.Store, prefix string, opts distributed.WatchdogOptions) {
	opts, on := opts.Resolved()
	if !on || st == nil {
		return
	}
	w := &watchdog{g: g, st: st, prefix: prefix, opts: opts}
	g.flight.mu.Lock()
	if g.flight.wd != nil {
		g.flight.mu.Unlock()
		return
	}
	g.flight.wd = w
	g.flight.mu.Unlock()
	g.wg.Go(w.loop)
}

// watchChild gives a new subgroup of g the watchdog g has, if any.
func (g *group) watchChild(child *group) {
	g.flight.mu.Lock()
	w := g.flight.wd
	g.flight.mu.Unlock()
	if w != nil {
		child.watch(w.st, w.prefix, w.opts)
	}
}

func (w *watchdog) key(rank int) string {
	return fmt.Sprintf("%s/flight/%d/%d", w.prefix, w.g.id, rank)
}

// tick is the longest time between two heartbeats (Snapshot.Every).
func (w *watchdog) tick() time.Duration { return max(w.opts.Interval/4, 10*time.Millisecond) }

// poll is how often the watchdog checks, and publishes a changed ring:
// every second in groups of up to 256 ranks, then more slowly so that the
// store gets at most about 256 heartbeats a second per group; never less
// often than tick.
func (w *watchdog) poll() time.Duration {
	return min(w.tick(), max(time.Second, time.Duration(len(w.g.ranks))*time.Second/256))
}

// loop publishes the ring when it changed (or a tick has passed) and
// checks for a stuck op every poll.
func (w *watchdog) loop() {
	g := w.g
	defer flight.Survive(w.opts.Log, g.me)
	var reported uint64 // the slot+1 of the last op diagnosed
	var version uint64  // the ring's version last published
	var last time.Time  // when it was published
	flight.Every(g.ctx, w.poll(), func() {
		// The heartbeat follows the ring: a ring published only every
		// tick was up to 15 s behind, and a rank stopped in between was
		// described by an old ring (often the empty one of its first beat).
		if v := g.flight.version.Load(); last.IsZero() || v != version || time.Since(last) >= w.tick() {
			version, last = v, time.Now()
			w.publish()
		}
		w.check(&reported)
	})
}

// publish sets this rank's heartbeat (best effort: a store that is slow
// or gone shows as a stale heartbeat).
func (w *watchdog) publish() {
	flight.Publish(w.g.ctx, w.st, w.key(w.g.rank), w.g.flight.snapshot(w.g, flightHeartbeatOps), w.tick())
}

// check diagnoses this rank's running op once it has run for Interval.
func (w *watchdog) check(reported *uint64) {
	g := w.g
	f := &g.flight
	f.mu.Lock()
	var slot uint64
	var started int64
	if f.n > 0 {
		// Ops run one at a time in issue order: the running one, if any,
		// is the oldest unfinished entry; scan back from the newest.
		for i := f.n; i > 0 && f.n-(i-1) <= flightRingSize; i-- {
			e := &f.ring[(i-1)%flightRingSize]
			if e.State == flight.Running {
				slot, started = i, e.Started
				break
			}
		}
	}
	f.mu.Unlock()
	now := time.Now()
	if slot == 0 || slot == *reported || now.UnixNano()-started < int64(w.opts.Interval) {
		return
	}
	*reported = slot
	mine := f.snapshot(g, flightRingSize)
	op, ok := mine.Stuck(now, w.opts.Interval)
	if !ok {
		return
	}
	snaps := w.collect(mine)
	d := flight.Diagnose(time.Now(), op, g.rank, snaps, g.ranks)
	ctx, cancel := context.WithTimeout(g.ctx, max(w.tick(), time.Second))
	defer cancel()
	if !flight.Claim(ctx, w.st, w.prefix, g.id, op.Seq, g.me) || g.ctx.Err() != nil {
		// Another waiting rank has reported this op, or the group broke
		// or closed while this rank looked (the op is over; the claim
		// failed for that reason, not for a store gone bad).
		return
	}
	w.opts.Tell(g.me, d)
}

// collect reads every other rank's last heartbeat, waiting at most a
// second or a tick for ranks that have not published yet.
func (w *watchdog) collect(mine flight.Snapshot) []*flight.Snapshot {
	ctx, cancel := context.WithTimeout(w.g.ctx, max(w.tick(), time.Second))
	defer cancel()
	return flight.Collect(ctx, w.st, w.key, w.g.ranks, w.g.rank, mine)
}
