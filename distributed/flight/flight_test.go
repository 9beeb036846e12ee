package flight

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
)

// t0 is the scenarios' clock origin; now is 61 s later.
var t0 = time.Unix(1_700_000_000, 0)

func at(s float64) int64 { return t0.Add(time.Duration(s * float64(time.Second))).UnixNano() }

func done(seq uint64, kind string, q, s, e float64) Record {
	return Record{Seq: seq, Kind: kind, Bytes: 400, Peer: -1, State: Done, Queued: at(q), Started: at(s), Ended: at(e)}
}

func run(seq uint64, kind string, s float64) Record {
	return Record{Seq: seq, Kind: kind, Bytes: 400, Peer: -1, State: Running, Queued: at(s), Started: at(s)}
}

func snap(rank int, taken float64, recs ...Record) *Snapshot {
	return &Snapshot{Rank: rank, GroupRank: rank, Taken: at(taken), Records: recs}
}

func p2p(kind string, peer, tag int, n uint32, st State, s float64) Record {
	r := Record{Seq: P2P | uint64(uint32(tag))<<32 | uint64(n), Kind: kind, Bytes: 64, Peer: peer, State: st, Queued: at(s)}
	if st >= Running {
		r.Started = at(s)
	}
	if st >= Done {
		r.Ended = at(s + 0.1)
	}
	return r
}

// TestDiagnose runs the scenarios named in the datadriven transcript
// testdata/diagnose and compares their reports with it (go test -rewrite
// rewrites it; review the diff):
//
//	diagnose
//	<scenario name>
//	----
//	<the report's text>
func TestDiagnose(t *testing.T) {
	now := time.Unix(0, at(61))
	bc := done(1579, "broadcast", 0, 0, 0)
	bc.Caller = "main.train"
	ar := run(1580, "allreduce", 0)
	ar.Caller = "github.com/cohortml/cohort/ddp.(*Model).Backward"
	cases := map[string]struct {
		self  int
		op    Record
		snaps []*Snapshot
	}{
		"one rank never entered": {0, ar, []*Snapshot{
			snap(0, 61, bc, ar), snap(1, 0.2, bc), snap(2, 61, bc, ar), snap(3, 61, bc, ar)}},
		"stale heartbeat of a stopped rank": {0, ar, []*Snapshot{
			snap(0, 61, bc, ar), snap(1, 0, run(1579, "broadcast", 0)), snap(2, 61, bc, ar)}},
		"stopped rank, period known": {0, ar, []*Snapshot{
			snap(0, 61, bc, ar), {Rank: 1, GroupRank: 1, Taken: at(0.1), Every: int64(time.Second), Records: []Record{bc}}, snap(2, 61, bc, ar)}},
		"stopped after hundreds of ops, its counts from its last heartbeat": {0, ar, []*Snapshot{
			snap(0, 61, bc, ar), {Rank: 1, GroupRank: 1, Taken: at(-0.8), Every: int64(15 * time.Second), Issued: 1579, Finished: 1579, Records: []Record{bc}}, snap(2, 61, bc, ar)}},
		"stopped inside the op": {0, ar, []*Snapshot{
			snap(0, 61, bc, ar), {Rank: 1, GroupRank: 1, Taken: at(0.5), Every: int64(time.Second), Records: []Record{bc, ar}}, snap(2, 61, bc, ar)}},
		"no heartbeat": {0, ar, []*Snapshot{snap(0, 61, bc, ar), nil, snap(2, 61, bc, ar)}},
		"stuck in another op": {1, run(12, "allreduce", 1), []*Snapshot{
			snap(0, 61, done(11, "barrier", 0, 0, 0.5), run(12, "allreduce", 1)),
			snap(1, 61, done(11, "barrier", 0, 0, 0.5), run(12, "allreduce", 1)),
			snap(2, 61, done(11, "barrier", 0, 0, 0.5), p2p("recv", 0, 1, 1, Running, 0.8), Record{Seq: 12, Kind: "allreduce", Peer: -1, State: Queued, Queued: at(0.9)}),
		}},
		"everyone in it": {0, run(7, "allgather", 1), []*Snapshot{
			snap(0, 61, run(7, "allgather", 1)), snap(1, 61, run(7, "allgather", 2))}},
		"recv with no matching send": {1, p2p("recv", 0, 3, 5, Running, 1), []*Snapshot{
			snap(0, 61, p2p("send", 1, 3, 4, Done, 0.5), done(9, "allreduce", 0.7, 0.7, 0.8)),
			snap(1, 61, p2p("recv", 0, 3, 4, Done, 0.5), p2p("recv", 0, 3, 5, Running, 1)),
			snap(2, 61, done(9, "allreduce", 0.7, 0.7, 0.8)),
		}},
		"empty ring": {0, run(1, "barrier", 0), []*Snapshot{snap(0, 61, run(1, "barrier", 0)), snap(1, 61)}},
	}
	datadriven.RunTest(t, filepath.Join("testdata", "diagnose"), func(t *testing.T, d *datadriven.TestData) string {
		c, ok := cases[strings.TrimSpace(d.Input)]
		if d.Cmd != "diagnose" || !ok {
			d.Fatalf(t, "want diagnose and a scenario's name, got %s %q", d.Cmd, d.Input)
		}
		ranks := make([]int, len(c.snaps))
		for i := range ranks {
			ranks[i] = i
		}
		r := Diagnose(now, c.op, c.self, c.snaps, ranks)
		if len(r.Waiting) == 0 && len(r.Absent)+len(r.Queued)+len(r.Unknown) == 0 {
			t.Errorf("nobody classified: %+v", r)
		}
		return r.Text + "\n"
	})
}

func TestDiagnoseClassifies(t *testing.T) {
	now := time.Unix(0, at(61))
	ar := run(1580, "allreduce", 0)
	d := Diagnose(now, ar, 0, []*Snapshot{snap(0, 61, ar), snap(1, 61, done(1579, "broadcast", 0, 0, 0)), snap(2, 61, ar)}, []int{4, 5, 6})
	if len(d.Absent) != 1 || d.Absent[0].Rank != 5 || d.Absent[0].Last.Seq != 1579 {
		t.Errorf("absent = %+v, want global rank 5 with last seq 1579", d.Absent)
	}
	if fmt.Sprint(d.Waiting) != "[4 6]" || d.Wait != 61*time.Second {
		t.Errorf("waiting %v for %v, want [4 6] for 61s", d.Waiting, d.Wait)
	}
	if want := "rank 5 never entered it (its last: broadcast #1579"; !strings.Contains(d.Text, want) {
		t.Errorf("text %q lacks %q", d.Text, want)
	}
}

func TestEncodeDecode(t *testing.T) {
	s := *snap(3, 1, done(1, "broadcast", 0, 0, 1), p2p("send", 1, 2, 7, Running, 1))
	s.Group = 42
	b := Encode(s)
	got, err := Decode(b, "rank 3")
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != fmt.Sprint(s) {
		t.Errorf("round trip:\n got %+v\nwant %+v", got, s)
	}
	for _, bad := range []struct {
		name string
		in   []byte
		want string
	}{
		{"garbage", []byte("{"), "snapshot from rank 9"},
		{"too large", make([]byte, MaxEncodedBytes+1), "limit"},
	} {
		t.Run(bad.name, func(t *testing.T) {
			if _, err := Decode(bad.in, "rank 9"); err == nil || !strings.Contains(err.Error(), bad.want) {
				t.Errorf("Decode = %v, want an error with %q", err, bad.want)
			}
		})
	}
}

func FuzzDecode(f *testing.F) {
	f.Add(Encode(*snap(1, 1, done(3, "allreduce", 0, 0, 1))))
	f.Add([]byte(`{"ops":[{"q":1}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := Decode(b, "fuzz")
		if err != nil {
			return
		}
		ranks := []int{0}
		_ = Diagnose(time.Now(), Record{Seq: 1, Kind: "allreduce", State: Running}, 0, []*Snapshot{&s}, ranks)
	})
}

func TestRecordName(t *testing.T) {
	for _, c := range []struct {
		r    Record
		want string
	}{
		{Record{Seq: 5, Kind: "allreduce"}, "allreduce #5"},
		{p2p("send", 2, 0, 3, Queued, 0), "send #3 to rank 2 tag 0"},
		{p2p("recv", 1, 7, 1, Queued, 0), "recv #1 from rank 1 tag 7"},
	} {
		t.Run(c.want, func(t *testing.T) {
			if got := c.r.Name(); got != c.want {
				t.Errorf("Name() = %q, want %q", got, c.want)
			}
		})
	}
}
