package checkpoint

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
)

// evenSlices splits n elements into world contiguous slices, the first
// n%world one element longer (the layout of a ZeRO flat partition).
func evenSlices(n int64, world int) []Slice {
	var out []Slice
	var off int64
	for r := range world {
		k := n / int64(world)
		if int64(r) < n%int64(world) {
			k++
		}
		out = append(out, Slice{Rank: r, Offset: off, Len: k})
		off += k
	}
	return out
}

// TestPlanReadTranscript records, for tensors saved by N ranks, how a
// reader at world M gathers each of its own slices: the datadriven
// transcript testdata/plans.txt (go test -rewrite rewrites it; review the
// diff). One directive per saved layout:
//
//	read shape=(D…) saved=K worlds=(M…)                  K ranks saved even slices
//	read shape=(D…) slices=(RANK/OFFSET/LEN…) worlds=(M…) these slices
//
// Each output line is the reader's world, rank and slice [offset,+len),
// then the pieces it reads: rankR[src,+len]→dst copies len elements from
// src elements into rank R's slice to dst in the reader's.
func TestPlanReadTranscript(t *testing.T) {
	datadriven.RunTest(t, filepath.Join("testdata", "plans.txt"), func(t *testing.T, d *datadriven.TestData) string {
		if d.Cmd != "read" {
			d.Fatalf(t, "unknown command %q (want read)", d.Cmd)
		}
		plan := TensorPlan{Name: "w"}
		var worlds []int
		d.ScanArgs(t, "shape", &plan.Shape)
		d.ScanArgs(t, "worlds", &worlds)
		n, err := numElements(plan.Shape, 1<<62)
		if err != nil {
			d.Fatalf(t, "%v", err)
		}
		if d.HasArg("saved") {
			var k int
			d.ScanArgs(t, "saved", &k)
			plan.Slices = evenSlices(n, k)
		} else {
			var specs []string
			d.ScanArgs(t, "slices", &specs)
			for _, spec := range specs {
				var sl Slice
				if _, err := fmt.Sscanf(spec, "%d/%d/%d", &sl.Rank, &sl.Offset, &sl.Len); err != nil {
					d.Fatalf(t, "slice %q: want RANK/OFFSET/LEN: %v", spec, err)
				}
				plan.Slices = append(plan.Slices, sl)
			}
		}
		if err := checkCover(plan, n, 8); err != nil {
			d.Fatalf(t, "%v", err)
		}
		var b strings.Builder
		for _, m := range worlds {
			for _, want := range evenSlices(n, m) {
				pieces := planRead(plan, want.Offset, want.Len)
				fmt.Fprintf(&b, "world=%d rank=%d [%d,+%d):", m, want.Rank, want.Offset, want.Len)
				var covered int64
				for _, p := range pieces {
					fmt.Fprintf(&b, " rank%d[%d,+%d]→%d", p.Rank, p.SrcOffset, p.Len, p.DstOffset)
					if p.DstOffset != covered {
						t.Errorf("%s world %d: piece %+v leaves a gap at %d", d.Pos, m, p, covered)
					}
					covered += p.Len
				}
				if covered != want.Len {
					t.Errorf("%s world %d rank %d: pieces cover %d of %d", d.Pos, m, want.Rank, covered, want.Len)
				}
				b.WriteByte('\n')
			}
		}
		return b.String()
	})
}

func TestBuildManifestRejects(t *testing.T) {
	file := func(r int) FileInfo {
		return FileInfo{Rank: r, Name: shardFileName(r), Bytes: 100, SHA256: strings.Repeat("0", 64)}
	}
	idx := func(r int, tp ...TensorPlan) rankIndex {
		return rankIndex{Rank: r, WorldSize: 2, Step: 5, File: file(r), Tensors: tp}
	}
	half := func(r int, shape []int, off, n int64) TensorPlan {
		return TensorPlan{Name: "w", Shape: shape, Slices: []Slice{{Rank: r, Offset: off, Len: n}}}
	}
	for _, tc := range []struct {
		name string
		idx  []rankIndex
		want string
	}{
		{"missing rank", []rankIndex{idx(0)}, "rank 1 wrote no shard index"},
		{"duplicate rank", []rankIndex{idx(0), idx(0)}, "duplicated"},
		{"other step", []rankIndex{idx(0), {Rank: 1, WorldSize: 2, Step: 4, File: file(1)}}, "rank 1 wrote step 4 at world 2"},
		{"shapes disagree", []rankIndex{idx(0, half(0, []int{4}, 0, 2)), idx(1, half(1, []int{5}, 2, 2))}, "says shape"},
		{"gap", []rankIndex{idx(0, half(0, []int{6}, 0, 2)), idx(1, half(1, []int{6}, 3, 3))}, "no rank holds elements [2, …) of 6"},
		{"short", []rankIndex{idx(0, half(0, []int{6}, 0, 2)), idx(1, half(1, []int{6}, 2, 3))}, "no rank holds elements [5, …)"},
		{"outside", []rankIndex{idx(0, half(0, []int{6}, 0, 2)), idx(1, half(1, []int{6}, 2, 5))}, "outside its 6 elements"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := buildManifest(5, 2, tc.idx)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("buildManifest: %v, want an error containing %q", err, tc.want)
			}
		})
	}
}
