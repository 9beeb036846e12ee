package launch

import (
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
)

// TestElasticTranscripts walks the rendezvous state machine through the
// scenarios in testdata/elastic/*.txt, datadriven transcripts: each
// directive is one command, and its output the state and every node's
// role after it:
//
//	limits MIN:MAX restarts=K      start over with these limits
//	join ID [nproc=N]              ID reports EvJoin (nproc 2 unless given)
//	failed ID [msg]                ID's worker failed in the current round
//	succeeded ID | exited ID | leave ID
//	dead BY ID…                    BY found the IDs dead
//	lastcall ID                    ID's last call ran out in the current round
//	limits-of ID MIN:MAX           ID joins with other limits (an error)
//
// go test -run TestElasticTranscripts -rewrite rewrites the expectations.
func TestElasticTranscripts(t *testing.T) {
	files, err := filepath.Glob("testdata/elastic/*.txt")
	if err != nil || len(files) == 0 {
		t.Fatalf("no transcripts in testdata/elastic: %v", err)
	}
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".txt"), func(t *testing.T) {
			var st *State
			lim := Limits{MinNodes: 1, MaxNodes: 1}
			var known []string
			datadriven.RunTest(t, file, func(t *testing.T, d *datadriven.TestData) string {
				f := []string{d.Cmd}
				for _, a := range d.CmdArgs {
					f = append(f, a.String())
				}
				return runCommand(t, strings.Join(f, " "), &st, &lim, &known)
			})
		})
	}
}

func runCommand(t *testing.T, cmd string, st **State, lim *Limits, known *[]string) string {
	t.Helper()
	f := strings.Fields(cmd)
	member := func(id string, args []string) Member {
		m := Member{ID: id, NProc: 2}
		for _, a := range args {
			if v, ok := strings.CutPrefix(a, "nproc="); ok {
				m.NProc, _ = strconv.Atoi(v)
			}
		}
		if !slices.Contains(*known, id) {
			*known = append(*known, id)
		}
		return m
	}
	round := 0
	if *st != nil {
		round = (*st).Round
	}
	var ev Event
	evLim := *lim
	switch f[0] {
	case "limits":
		*lim = parseLimits(t, f[1], f[2:])
		*st, *known = nil, nil
		return "(no state)\n"
	case "join":
		ev = Event{Kind: EvJoin, Me: member(f[1], f[2:])}
	case "limits-of":
		ev = Event{Kind: EvJoin, Me: member(f[1], nil)}
		evLim = parseLimits(t, f[2], nil)
		evLim.MaxRestarts = lim.MaxRestarts
	case "failed":
		ev = Event{Kind: EvFailed, Me: member(f[1], nil), Round: round, Msg: strings.Join(f[2:], " ")}
	case "succeeded":
		ev = Event{Kind: EvSucceeded, Me: member(f[1], nil), Round: round}
	case "exited":
		ev = Event{Kind: EvExited, Me: member(f[1], nil)}
	case "leave":
		ev = Event{Kind: EvLeave, Me: member(f[1], nil)}
	case "dead":
		ev = Event{Kind: EvDead, Me: member(f[1], nil), IDs: f[2:]}
	case "lastcall":
		ev = Event{Kind: EvLastCall, Me: member(f[1], nil), Round: round}
	case "stale":
		// An event about the previous round.
		ev = Event{Kind: EvFailed, Me: member(f[1], nil), Round: round - 1, Msg: "late"}
	default:
		t.Fatalf("unknown command %q", cmd)
	}
	next, err := Apply(*st, ev, evLim)
	if err != nil {
		return "error: " + err.Error() + "\n"
	}
	// Apply must not touch its input, and must round-trip the wire form.
	if *st != nil {
		before := (*st).encode()
		if _, err := Apply(*st, ev, evLim); err != nil || string((*st).encode()) != string(before) {
			t.Fatalf("%s: Apply mutated its input", cmd)
		}
	}
	back, err := decodeState(next.encode())
	if err != nil || string(back.encode()) != string(next.encode()) {
		t.Fatalf("%s: state does not round-trip: %v", cmd, err)
	}
	*st = &next
	return describeState(*st, *known)
}

func parseLimits(t *testing.T, nodes string, rest []string) Limits {
	t.Helper()
	lo, hi, _ := strings.Cut(nodes, ":")
	var l Limits
	l.MinNodes, _ = strconv.Atoi(lo)
	l.MaxNodes, _ = strconv.Atoi(hi)
	for _, a := range rest {
		if v, ok := strings.CutPrefix(a, "restarts="); ok {
			l.MaxRestarts, _ = strconv.Atoi(v)
		}
	}
	return l
}

// describeState prints the state and each known node's role.
func describeState(s *State, known []string) string {
	var b strings.Builder
	phase := "open"
	if s.Closed {
		phase = "closed"
	}
	fmt.Fprintf(&b, "round %d %s nodes=%v", s.Round, phase, memberIDs(s.Nodes))
	if len(s.Waiting) > 0 {
		fmt.Fprintf(&b, " waiting=%v", memberIDs(s.Waiting))
	}
	if len(s.Expect) > 0 {
		fmt.Fprintf(&b, " expect=%v", s.Expect)
	}
	if s.Charge != "" {
		fmt.Fprintf(&b, " charge=%q prev=%v", s.Charge, s.Prev)
	}
	fmt.Fprintf(&b, " restarts=%d", s.Restarts)
	if len(s.Done) > 0 {
		fmt.Fprintf(&b, " done=%v", s.Done)
	}
	if len(s.Exited) > 0 {
		fmt.Fprintf(&b, " exited=%v", s.Exited)
	}
	b.WriteString("\n")
	if s.Reason != "" {
		fmt.Fprintf(&b, "reason: %s\n", s.Reason)
	}
	if s.Failed != "" {
		fmt.Fprintf(&b, "failed: %s\n", s.Failed)
	}
	for _, id := range known {
		role, a := Role(s, id)
		fmt.Fprintf(&b, "%s: %s", id, role)
		if role == RoleRun {
			fmt.Fprintf(&b, " node %d/%d ranks %d-%d world %d master %s", a.NodeRank, a.NumNodes, a.RankBase, a.RankBase+a.NProc-1, a.WorldSize, a.Master.ID)
		}
		b.WriteString("\n")
	}
	return b.String()
}

func TestLiveness(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	tests := []struct {
		name  string
		beats []struct {
			at    float64
			count int64
		} // observations of node "a"
		since  float64
		now    float64
		silent time.Duration
	}{
		{"never-seen", nil, 0, 5, 0},
		{"steady", []struct {
			at    float64
			count int64
		}{{0, 1}, {5, 2}, {10, 3}}, 0, 12, 2 * time.Second},
		{"stopped", []struct {
			at    float64
			count int64
		}{{0, 1}, {5, 2}, {6, 2}, {9, 2}}, 0, 20, 15 * time.Second},
		{"first-read-counts-as-change", []struct {
			at    float64
			count int64
		}{{3, 7}}, 0, 4, time.Second},
		{"since-round-opened", []struct {
			at    float64
			count int64
		}{{0, 1}, {5, 2}}, 8, 10, 2 * time.Second},
		{"beat-after-round-opened", []struct {
			at    float64
			count int64
		}{{0, 1}, {9, 2}}, 8, 10, time.Second},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var l liveness
			for _, b := range tc.beats {
				l.observe("a", b.count, at(b.at))
			}
			since := time.Time{}
			if tc.since > 0 {
				since = at(tc.since)
			}
			if got := l.silent("a", since, at(tc.now)); got != tc.silent {
				t.Fatalf("silent = %v; want %v", got, tc.silent)
			}
		})
	}
}
