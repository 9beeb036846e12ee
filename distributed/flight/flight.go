package flight

import (
	"encoding/json"
	"fmt"
	"time"
)

// State is where an op is in its life.
type State uint8

const (
	Queued  State = iota // issued, waiting behind earlier ops of its group
	Running              // its turn came: it is exchanging data with peers
	Done                 // finished successfully
	Failed               // finished with an error
)

var stateNames = [...]string{"queued", "running", "done", "failed"}

func (s State) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return fmt.Sprintf("state(%d)", uint8(s))
}

// P2P marks the sequence numbers of point-to-point ops (send, recv): they
// count per (peer, tag, direction) and have this bit set; collectives count
// per group from 1.
const P2P = uint64(1) << 63

// Record is one op in a rank's ring. Times are Unix nanoseconds on the
// recording rank's clock; 0 means not yet.
type Record struct {
	Seq   uint64 `json:"q"`
	Kind  string `json:"k"`           // "allreduce", "broadcast", "send", …
	Bytes int64  `json:"b,omitempty"` // the buffer's size on this rank
	// Peer is the root of a rooted collective or the other side of a send
	// or recv (a group rank); −1 when the kind has none.
	Peer    int    `json:"p"`
	State   State  `json:"s"`
	Queued  int64  `json:"t0"`
	Started int64  `json:"t1,omitempty"`
	Ended   int64  `json:"t2,omitempty"`
	Caller  string `json:"c,omitempty"` // the first function outside package distributed that issued it
}

// Start marks r running at now (Unix nanoseconds).
func (r *Record) Start(now int64) { r.State, r.Started = Running, now }

// End marks r done at now, or failed if err is not nil; an op that ended
// without starting (failed while queued) is taken to have started then.
func (r *Record) End(now int64, err error) {
	r.State, r.Ended = Done, now
	if err != nil {
		r.State = Failed
	}
	if r.Started == 0 {
		r.Started = now
	}
}

// IsP2P reports whether r is a send or recv.
func (r Record) IsP2P() bool { return r.Seq&P2P != 0 }

// Name renders the op as "allreduce #1580" (collectives) or
// "send #3 to rank 2 tag 0" (point-to-point; rank is a group rank).
func (r Record) Name() string {
	if !r.IsP2P() {
		return fmt.Sprintf("%s #%d", r.Kind, r.Seq)
	}
	dir := "to"
	if r.Kind == "recv" {
		dir = "from"
	}
	return fmt.Sprintf("%s #%d %s rank %d tag %d", r.Kind, uint32(r.Seq), dir, r.Peer, int32(uint32(r.Seq>>32)&^uint32(1<<31)))
}

// Snapshot is one rank's ring at one moment.
type Snapshot struct {
	Group uint32 `json:"g"`
	Rank  int    `json:"r"` // global rank
	// GroupRank is the rank's place in the group (Peer fields count in it).
	GroupRank int   `json:"gr"`
	Taken     int64 `json:"t"` // Unix nanoseconds
	// Every is how often the rank publishes (nanoseconds; 0 if unknown):
	// a snapshot much older than that comes from a rank that has stopped.
	Every int64 `json:"e,omitempty"`
	// Issued and Finished count the ops the rank has issued and finished
	// in the group since it was made (Records holds only the last few).
	Issued   uint64   `json:"n,omitempty"`
	Finished uint64   `json:"f,omitempty"`
	Records  []Record `json:"ops"` // oldest first
}

// MaxEncodedBytes bounds an encoded snapshot; Decode refuses larger input.
const MaxEncodedBytes = 64 << 10

// Encode serialises s (compact JSON).
func Encode(s Snapshot) []byte {
	b, err := json.Marshal(s)
	if err != nil {
		panic("flight: encode: " + err.Error()) // plain data: cannot fail
	}
	return b
}

// Decode parses an encoded snapshot; from names its source in errors.
func Decode(b []byte, from string) (Snapshot, error) {
	var s Snapshot
	if len(b) > MaxEncodedBytes {
		return s, fmt.Errorf("flight: snapshot from %s: %d bytes, limit %d", from, len(b), MaxEncodedBytes)
	}
	if err := json.Unmarshal(b, &s); err != nil {
		return Snapshot{}, fmt.Errorf("flight: snapshot from %s: %w", from, err)
	}
	return s, nil
}

// Stuck returns the op of s that has been running longest, if it has run
// for at least d by now, and whether there is one.
func (s Snapshot) Stuck(now time.Time, d time.Duration) (Record, bool) {
	for _, r := range s.Records {
		if r.State == Running && r.Started != 0 && now.UnixNano()-r.Started >= int64(d) {
			return r, true
		}
	}
	return Record{}, false
}
