package collective

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the plan goldens in testdata/plans")

// goldenCases are small configurations whose plans are easy to review by
// eye: a non-power-of-two world, uneven chunks, a root in the middle, and
// 2-element segments so that pipelines show. The ring plans run inline,
// segment by segment, unless inlining is off (InlineBytes −1): then they
// are pipelined for the executor's goroutines.
var goldenCases = []struct {
	size  int
	call  Call
	tuned Tuning
}{
	{3, Call{Kind: AllReduce, DType: Float32, Count: 10}, Tuning{SegmentBytes: 8, Depth: 2}},
	{3, Call{Kind: AllReduce, DType: Float32, Count: 10}, Tuning{SegmentBytes: 8, Depth: 2, InlineBytes: -1}},
	{5, Call{Kind: AllReduce, DType: Float32, Op: Avg, Count: 9}, Tuning{SegmentBytes: 8, Depth: 2}},
	{5, Call{Kind: Broadcast, DType: Float32, Count: 5, Root: 2}, Tuning{SegmentBytes: 8, Depth: 2}},
	{5, Call{Kind: Reduce, DType: Float32, Count: 5, Root: 2}, Tuning{SegmentBytes: 8, Depth: 2}},
	{3, Call{Kind: AllGather, DType: Float32, Count: 3}, Tuning{SegmentBytes: 8, Depth: 2}},
	{3, Call{Kind: AllGather, DType: Float32, Count: 3}, Tuning{SegmentBytes: 8, Depth: 2, InlineBytes: -1}},
	{3, Call{Kind: ReduceScatter, DType: Float32, Count: 3}, Tuning{SegmentBytes: 8, Depth: 2}},
	{3, Call{Kind: ReduceScatter, DType: Float32, Count: 3}, Tuning{SegmentBytes: 8, Depth: 2, InlineBytes: -1}},
	{3, Call{Kind: AllToAll, DType: Float32, Count: 2}, Tuning{}},
	{3, Call{Kind: Gather, DType: Float32, Count: 2, Root: 1}, Tuning{}},
	{3, Call{Kind: Scatter, DType: Float32, Count: 2, Root: 1}, Tuning{}},
	{5, Call{Kind: Barrier}, Tuning{}},
}

// TestPlanGoldens renders every algorithm's plans for every rank of the
// cases above and compares them with testdata/plans/<kind>_<algo>.txt.
func TestPlanGoldens(t *testing.T) {
	for k := range numKinds {
		if k == Send || k == Recv || k == Agree {
			continue
		}
		for _, algo := range Algorithms(k) {
			name := fmt.Sprintf("%v_%s", k, algo)
			t.Run(name, func(t *testing.T) {
				var b strings.Builder
				for _, gc := range goldenCases {
					if gc.call.Kind != k {
						continue
					}
					fmt.Fprintf(&b, "# %v on %d ranks, %s, segment %d bytes, depth %d",
						gc.call, gc.size, algo, gc.tuned.SegmentBytes, gc.tuned.Depth)
					if gc.tuned.InlineBytes < 0 {
						b.WriteString(", inlining off")
					}
					b.WriteString("\n")
					for r := range gc.size {
						p, err := NewPlan(gc.call, gc.size, r, algo, gc.tuned)
						if err != nil {
							t.Fatal(err)
						}
						b.WriteString("\n")
						b.WriteString(p.String())
					}
					b.WriteString("\n")
				}
				path := filepath.Join("testdata", "plans", name+".txt")
				if *update {
					if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
						t.Fatal(err)
					}
					if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
						t.Fatal(err)
					}
					return
				}
				want, err := os.ReadFile(path)
				if err != nil {
					t.Fatalf("%v (run go test -update to create it)", err)
				}
				if got := b.String(); got != string(want) {
					t.Errorf("plan differs from %s (go test -update rewrites it; review the diff):\n%s", path, firstDiff(got, string(want)))
				}
			})
		}
	}
}

func firstDiff(got, want string) string {
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	for i := range max(len(g), len(w)) {
		var gl, wl string
		if i < len(g) {
			gl = g[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if gl != wl {
			return fmt.Sprintf("line %d:\n got: %s\nwant: %s", i+1, gl, wl)
		}
	}
	return ""
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
