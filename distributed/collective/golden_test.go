package collective

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
)

// TestPlanGoldens renders plans for every rank and compares them with the
// transcripts in testdata/plans/<kind>_<algo>.txt, one per algorithm of
// every kind (go test -rewrite rewrites them; review the diff). Each
// "plan" directive names a configuration small enough to review by eye: a
// non-power-of-two world, uneven chunks, a root in the middle, and
// 2-element segments so that pipelines show. The ring plans run inline,
// segment by segment, unless inlining is off (inline=off, InlineBytes −1):
// then they are pipelined for the executor's goroutines.
//
//	plan ranks=N count=N [dtype=float32] [op=sum] [root=N] [segment=BYTES] [depth=N] [inline=off]
func TestPlanGoldens(t *testing.T) {
	for k := range numKinds {
		if k == Send || k == Recv || k == Agree {
			continue
		}
		for _, algo := range Algorithms(k) {
			name := fmt.Sprintf("%v_%s", k, algo)
			t.Run(name, func(t *testing.T) {
				datadriven.RunTest(t, filepath.Join("testdata", "plans", name+".txt"), func(t *testing.T, d *datadriven.TestData) string {
					if d.Cmd != "plan" {
						d.Fatalf(t, "unknown command %q (want plan)", d.Cmd)
					}
					size, c, tuned := planArgs(t, d, k)
					var b strings.Builder
					for r := range size {
						p, err := NewPlan(c, size, r, algo, tuned)
						if err != nil {
							d.Fatalf(t, "rank %d: %v", r, err)
						}
						if r > 0 {
							b.WriteString("\n")
						}
						b.WriteString(p.String())
					}
					return b.String()
				})
			})
		}
	}
}

// planArgs reads a plan directive's arguments: the group size, the call
// (of kind k) and the tuning.
func planArgs(t *testing.T, d *datadriven.TestData, k Kind) (int, Call, Tuning) {
	c := Call{Kind: k, DType: Float32, Op: Sum}
	var size int
	var tuned Tuning
	d.ScanArgs(t, "ranks", &size)
	for _, arg := range d.CmdArgs {
		switch arg.Key {
		case "ranks":
		case "count":
			d.ScanArgs(t, "count", &c.Count)
		case "root":
			d.ScanArgs(t, "root", &c.Root)
		case "segment":
			d.ScanArgs(t, "segment", &tuned.SegmentBytes)
		case "depth":
			d.ScanArgs(t, "depth", &tuned.Depth)
		case "inline":
			if len(arg.Vals) != 1 || arg.Vals[0] != "off" {
				d.Fatalf(t, "inline=%v: want inline=off", arg.Vals)
			}
			tuned.InlineBytes = -1
		case "dtype":
			c.DType = parseName(t, d, arg, numDTypes)
		case "op":
			c.Op = parseName(t, d, arg, numOps)
		default:
			d.Fatalf(t, "unknown argument %q", arg.Key)
		}
	}
	return size, c, tuned
}

// parseName returns the value of type T below n whose String is arg's
// value.
func parseName[T interface {
	~uint8 | ~int
	String() string
}](t *testing.T, d *datadriven.TestData, arg datadriven.CmdArg, n T) T {
	for v := T(0); v < n; v++ {
		if len(arg.Vals) == 1 && v.String() == arg.Vals[0] {
			return v
		}
	}
	d.Fatalf(t, "%s=%v: unknown", arg.Key, arg.Vals)
	return 0
}

// TestCombinedHeader: an inline plan's op header rides in front of its
// first message only when that message is small (staging a segment of a
// large plan would copy it twice more); either way the plan runs inline.
func TestCombinedHeader(t *testing.T) {
	for _, tc := range []struct {
		count    int
		combined bool
	}{{1000, true}, {combineBytes / 4 * 2, true}, {combineBytes/4*2 + 2, false}, {4 << 20, false}} {
		c := Call{Kind: AllReduce, DType: Float32, Op: Sum, Count: tc.count}
		for r := range 2 {
			p, err := NewPlan(c, 2, r, "ring", Tuning{})
			if err != nil {
				t.Fatal(err)
			}
			if !p.Inline || (len(p.CombinedFrom) > 0) != tc.combined || carriesHeader(p, 4) != tc.combined {
				t.Errorf("count %d rank %d: inline %v, combined from %v, carries header %v; want inline, combined %v",
					tc.count, r, p.Inline, p.CombinedFrom, carriesHeader(p, 4), tc.combined)
			}
		}
	}
}
