package nccl

import (
	"sync"
	"time"

	"github.com/cohortml/cohort/distributed/flight"
)

// The flight recorder, kept on the host as the native backend keeps it:
// a ring of the group's last ops (kind, seq, size, peer, queued, started
// and ended times), written by submit, the issuer and the completer. The
// seqs are the native backend's (collectives count per group from 1;
// sends and receives per peer, tag and direction, with flight.P2P set),
// so a hang on NCCL reads as one on the native backend does. "started"
// is when the op was enqueued on the communication stream; "done" when
// its completion event fired.

// ringSize is how many ops a group remembers.
const ringSize = 64

// recorder is a group's ring; the zero value is ready.
type recorder struct {
	mu   sync.Mutex
	ring [ringSize]flight.Record
	n    uint64 // ops ever recorded; op i is ring[i%ringSize] while n−i ≤ ringSize
}

func (f *recorder) enqueue(g *group, o *op) {
	now := time.Now().UnixNano()
	f.mu.Lock()
	o.slot = f.n
	f.ring[f.n%ringSize] = flight.Record{Seq: o.seq, Kind: o.kind.String(), Bytes: o.bytes, Peer: o.peer, State: flight.Queued, Queued: now}
	f.n++
	f.mu.Unlock()
}

func (f *recorder) entry(o *op) *flight.Record {
	if f.n-o.slot > ringSize {
		return nil
	}
	return &f.ring[o.slot%ringSize]
}

func (f *recorder) start(o *op) {
	now := time.Now().UnixNano()
	f.mu.Lock()
	if e := f.entry(o); e != nil {
		e.Start(now)
	}
	f.mu.Unlock()
}

func (f *recorder) end(o *op, err error) {
	now := time.Now().UnixNano()
	f.mu.Lock()
	if e := f.entry(o); e != nil {
		e.End(now, err)
	}
	f.mu.Unlock()
}

// Flight returns the group's last ops, oldest first, as the watchdog and
// a hang report read them.
func (g *group) Flight() flight.Snapshot {
	f := &g.flight
	f.mu.Lock()
	k := min(f.n, ringSize)
	recs := make([]flight.Record, 0, k)
	for i := f.n - k; i < f.n; i++ {
		recs = append(recs, f.ring[i%ringSize])
	}
	f.mu.Unlock()
	return flight.Snapshot{Group: g.id, Rank: g.me, GroupRank: g.rank, Taken: time.Now().UnixNano(), Records: recs}
}
