package native

import (
	"reflect"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cohortml/cohort/distributed"
	"github.com/cohortml/cohort/distributed/collective"
	"github.com/cohortml/cohort/distributed/flight"
)

// The flight recorder: every group keeps a ring of its last ops (kind,
// seq, size, queued/started/ended times and the issuing function), written
// by submit and by the op goroutine, read by the watchdog (watchdog.go)
// and published as the rank's heartbeat. Recording costs three clock reads,
// a walk of a few frame pointers and three uncontended lock round trips
// per op.

// flightRingSize is how many ops a group remembers; heartbeats carry the
// last flightHeartbeatOps of them.
const (
	flightRingSize     = 64
	flightHeartbeatOps = 16
	flightFrames       = 4
)

// flightRecorder is a group's ring. The zero value is ready.
type flightRecorder struct {
	mu   sync.Mutex
	ring [flightRingSize]flightEntry
	n    uint64 // ops ever recorded; op i lives in ring[i%flightRingSize] while n−i ≤ flightRingSize
	done uint64 // ops ever finished (successfully or not)
	// version changes whenever the ring does (the watchdog publishes only
	// changed rings).
	version atomic.Uint64
	wd      *watchdog // set once by watch, before or while ops run; read under mu
}

// flightEntry is an op's record (Seq, State and the times; the rest is
// filled in from call and pcs when a snapshot is taken).
type flightEntry struct {
	flight.Record
	call collective.Call
	pcs  [flightFrames]uintptr
}

// enqueue records a newly issued op; it runs under g.mu, after o.seq is
// assigned, so ring order is issue order. It is called by submit only.
//
//go:noinline
func (f *flightRecorder) enqueue(o *op) {
	var pcs [flightFrames]uintptr
	issuerPCs(pcs[:]) // the frames above submit; caller() skips the rest of dist
	now := time.Now().UnixNano()
	f.mu.Lock()
	o.flightSlot = f.n
	f.ring[f.n%flightRingSize] = flightEntry{Record: flight.Record{Seq: o.seq, State: flight.Queued, Queued: now}, call: o.call, pcs: pcs}
	f.n++
	f.mu.Unlock()
	f.version.Add(1)
}

// start marks o running.
func (f *flightRecorder) start(o *op) {
	now := time.Now().UnixNano()
	f.mu.Lock()
	if e := f.entry(o); e != nil {
		e.Start(now)
	}
	f.mu.Unlock()
	f.version.Add(1)
}

// end marks o finished.
func (f *flightRecorder) end(o *op, err error) {
	now := time.Now().UnixNano()
	f.mu.Lock()
	f.done++
	if e := f.entry(o); e != nil {
		e.End(now, err)
	}
	f.mu.Unlock()
	f.version.Add(1)
}

// entry returns o's entry, or nil if the ring has moved past it. f.mu held.
func (f *flightRecorder) entry(o *op) *flightEntry {
	if f.n-o.flightSlot > flightRingSize {
		return nil
	}
	return &f.ring[o.flightSlot%flightRingSize]
}

// snapshot returns the last max ops of g's ring, oldest first.
func (f *flightRecorder) snapshot(g *group, max int) flight.Snapshot {
	f.mu.Lock()
	k := min(uint64(max), f.n, flightRingSize)
	entries := make([]flightEntry, 0, k)
	for i := f.n - k; i < f.n; i++ {
		entries = append(entries, f.ring[i%flightRingSize])
	}
	issued, finished := f.n, f.done
	f.mu.Unlock()
	s := flight.Snapshot{Group: g.id, Rank: g.me, GroupRank: g.rank, Taken: time.Now().UnixNano(),
		Issued: issued, Finished: finished, Records: make([]flight.Record, len(entries))}
	for i, e := range entries {
		c := e.call
		peer := -1
		switch {
		case c.Kind == collective.Send || c.Kind == collective.Recv:
			peer = c.Peer
		case c.Kind == collective.Broadcast || c.Kind == collective.Reduce || c.Kind == collective.Gather || c.Kind == collective.Scatter:
			peer = c.Root
		}
		r := e.Record
		r.Kind, r.Bytes, r.Peer, r.Caller = c.Kind.String(), int64(c.Count)*int64(c.DType.Size()), peer, caller(e.pcs[:])
		s.Records[i] = r
	}
	return s
}

// ownPackages are the packages whose frames are not an op's caller: this
// backend's and the API's (distributed.NewGroup, Mesh).
var ownPackages = []string{reflect.TypeFor[group]().PkgPath() + ".", reflect.TypeFor[distributed.Buffer]().PkgPath() + "."}

// caller names the first function in pcs outside this package and
// package distributed.
func caller(pcs []uintptr) string {
	for len(pcs) > 0 && pcs[len(pcs)-1] == 0 {
		pcs = pcs[:len(pcs)-1]
	}
	if len(pcs) == 0 {
		return ""
	}
	frames := runtime.CallersFrames(pcs)
	for {
		fr, more := frames.Next()
		if fr.Function != "" && !slices.ContainsFunc(ownPackages, func(p string) bool { return strings.HasPrefix(fr.Function, p) }) {
			return fr.Function
		}
		if !more {
			return ""
		}
	}
}
