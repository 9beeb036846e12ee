package flight

import (
	"fmt"
	"strings"
	"time"
)

// Diagnosis is what the snapshots of a group say about one stuck op.
// Ranks are global ranks.
type Diagnosis struct {
	Op      Record        // the stuck op, as the reporting rank recorded it
	Waiting []int         // ranks running it (the reporting rank among them)
	Wait    time.Duration // the longest of their waits
	Absent  []Absence     // ranks that have not issued it
	Queued  []Absence     // ranks that issued it but are still busy with an earlier op
	Done    []int         // ranks that finished it
	Silent  []Absence     // ranks in it (or done) whose heartbeats stopped: stopped or unreachable
	Unknown []int         // ranks with no snapshot
	Text    string        // the one-line report
}

// Absence is a rank that is not in the stuck op, and where it last was.
type Absence struct {
	Rank  int
	Last  *Record       // its most recently issued op; nil if its ring is empty
	Age   time.Duration // how old its snapshot was
	Every time.Duration // how often it publishes (0 if unknown)
	// Issued and Finished are its op counts in the group when the
	// snapshot was taken (Snapshot.Issued, Snapshot.Finished).
	Issued, Finished uint64
}

// Diagnose compares the snapshots of a group's ranks about op, which the
// reporting rank (snaps[self]) has been running since op.Started. snaps
// and ranks are indexed by group rank: ranks[i] is the global rank of
// group rank i, and snaps[i] its latest snapshot (nil if none arrived). For
// a collective every rank takes part; for a send or recv only its peer.
func Diagnose(now time.Time, op Record, self int, snaps []*Snapshot, ranks []int) Diagnosis {
	d := Diagnosis{Op: op}
	involved := make([]int, 0, len(ranks))
	if op.IsP2P() {
		involved = append(involved, self)
		if op.Peer >= 0 && op.Peer < len(ranks) && op.Peer != self {
			involved = append(involved, op.Peer)
		}
	} else {
		for i := range ranks {
			involved = append(involved, i)
		}
	}
	for _, p := range involved {
		s := snaps[p]
		if s == nil {
			d.Unknown = append(d.Unknown, ranks[p])
			continue
		}
		age := time.Duration(now.UnixNano() - s.Taken)
		var mine *Record
		for i := range s.Records {
			if matches(op, self, p, s.Records[i]) {
				mine = &s.Records[i]
			}
		}
		var last *Record
		if n := len(s.Records); n > 0 {
			last = &s.Records[n-1]
		}
		absence := func(last *Record) Absence {
			return Absence{Rank: ranks[p], Last: last, Age: age, Every: time.Duration(s.Every), Issued: s.Issued, Finished: s.Finished}
		}
		stale := s.Every > 0 && age > 2*time.Duration(s.Every)+time.Second
		switch {
		case mine != nil && mine.State != Queued && stale:
			d.Silent = append(d.Silent, absence(last))
		case mine == nil:
			d.Absent = append(d.Absent, absence(last))
		case mine.State == Queued:
			d.Queued = append(d.Queued, absence(running(s)))
		case mine.State == Running:
			d.Waiting = append(d.Waiting, ranks[p])
			if mine.Started != 0 {
				d.Wait = max(d.Wait, time.Duration(now.UnixNano()-mine.Started))
			}
		default:
			d.Done = append(d.Done, ranks[p])
		}
	}
	d.Text = d.render(now)
	return d
}

// matches reports whether rec, in group rank p's ring, is p's side of op
// as issued by group rank self.
func matches(op Record, self, p int, rec Record) bool {
	if rec.Seq != op.Seq {
		return false
	}
	if !op.IsP2P() {
		return !rec.IsP2P()
	}
	if p == self {
		return rec.Kind == op.Kind && rec.Peer == op.Peer
	}
	want := "recv"
	if op.Kind == "recv" {
		want = "send"
	}
	return rec.Kind == want && rec.Peer == self
}

// running returns the op s is running, if any, else its last record.
func running(s *Snapshot) *Record {
	for i := range s.Records {
		if s.Records[i].State == Running {
			return &s.Records[i]
		}
	}
	if n := len(s.Records); n > 0 {
		return &s.Records[n-1]
	}
	return nil
}

func (d Diagnosis) render(now time.Time) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s", d.Op.Name())
	if d.Op.Caller != "" {
		fmt.Fprintf(&b, " (at %s)", d.Op.Caller)
	}
	b.WriteString(" is stuck: ")
	var parts []string
	const show = 8
	for i, a := range d.Absent {
		if i == show {
			parts = append(parts, fmt.Sprintf("%d more ranks never entered it", len(d.Absent)-show))
			break
		}
		parts = append(parts, fmt.Sprintf("rank %d never entered it (its last: %s%s)", a.Rank, lastOp(now, a.Last), counts(a)+staleness(a)))
	}
	for i, a := range d.Queued {
		if i == show {
			parts = append(parts, fmt.Sprintf("%d more ranks have it queued", len(d.Queued)-show))
			break
		}
		parts = append(parts, fmt.Sprintf("rank %d has it queued behind %s%s", a.Rank, lastOp(now, a.Last), counts(a)+staleness(a)))
	}
	for _, a := range d.Silent {
		parts = append(parts, fmt.Sprintf("rank %d has sent no heartbeat for %s: stopped or unreachable (its last: %s%s)", a.Rank, round(a.Age), lastOp(now, a.Last), counts(a)))
	}
	if len(d.Unknown) > 0 {
		parts = append(parts, fmt.Sprintf("%s sent no heartbeat", rankList(d.Unknown)))
	}
	if len(d.Done) > 0 {
		parts = append(parts, fmt.Sprintf("%s finished it", rankList(d.Done)))
	}
	if len(d.Waiting) > 0 {
		parts = append(parts, fmt.Sprintf("%s waiting in it for %s", rankList(d.Waiting), round(d.Wait)))
	}
	if len(d.Absent)+len(d.Queued)+len(d.Unknown)+len(d.Done)+len(d.Silent) == 0 {
		parts = append(parts, "every rank is in it (a slow or lost transfer, or a stalled transport)")
	}
	b.WriteString(strings.Join(parts, "; "))
	return b.String()
}

// lastOp renders a rank's last op: "broadcast #1579 at main.train, done 3s ago".
func lastOp(now time.Time, r *Record) string {
	if r == nil {
		return "no op yet"
	}
	s := r.Name()
	if r.Caller != "" {
		s += " at " + r.Caller
	}
	switch r.State {
	case Queued:
		s += fmt.Sprintf(", queued %s ago", round(time.Duration(now.UnixNano()-r.Queued)))
	case Running:
		s += fmt.Sprintf(", running for %s", round(time.Duration(now.UnixNano()-r.Started)))
	default:
		s += fmt.Sprintf(", %v %s ago", r.State, round(time.Duration(now.UnixNano()-r.Ended)))
	}
	return s
}

// counts renders a rank's op counts when its snapshot has them:
// "; 730 ops issued, 730 finished".
func counts(a Absence) string {
	if a.Issued == 0 {
		return ""
	}
	ops := "ops"
	if a.Issued == 1 {
		ops = "op"
	}
	return fmt.Sprintf("; %d %s issued, %d finished", a.Issued, ops, a.Finished)
}

// staleness notes an old snapshot: a rank that stopped publishing (when
// its period is known), or just its age.
func staleness(a Absence) string {
	switch {
	case a.Every > 0 && a.Age > 2*a.Every+time.Second:
		return fmt.Sprintf("; no heartbeat for %s: stopped or unreachable", round(a.Age))
	case a.Every > 0 || a.Age < time.Second:
		return ""
	}
	return fmt.Sprintf("; heartbeat %s old", round(a.Age))
}

// round renders d in seconds: "61s", "2.5s".
func round(d time.Duration) string {
	if d >= 10*time.Second {
		return fmt.Sprintf("%.0fs", d.Seconds())
	}
	return fmt.Sprintf("%.1fs", d.Seconds())
}

// rankList renders "rank 2" or "ranks 0,2,3".
func rankList(r []int) string {
	if len(r) == 1 {
		return fmt.Sprintf("rank %d", r[0])
	}
	s := make([]string, len(r))
	for i, x := range r {
		s[i] = fmt.Sprint(x)
	}
	return "ranks " + strings.Join(s, ",")
}
