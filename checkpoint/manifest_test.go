package checkpoint

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata goldens")

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
// reader at world M gathers each of its own slices. Review the diff of
// testdata/plans.txt after -update.
func TestPlanReadTranscript(t *testing.T) {
	var b strings.Builder
	b.WriteString("# Each line: the reader's world, rank and slice [offset,+len), then the pieces it reads:\n")
	b.WriteString("# rankR[src,+len]→dst copies len elements from src elements into rank R's slice to dst in the reader's.\n")
	cases := []struct {
		name   string
		plan   TensorPlan
		worlds []int
	}{
		{"n=10 saved by 3", TensorPlan{Name: "w", Shape: []int{10}, Slices: evenSlices(10, 3)}, []int{1, 2, 4}},
		{"n=7 saved by 2", TensorPlan{Name: "w", Shape: []int{7}, Slices: evenSlices(7, 2)}, []int{3}},
		{"n=3 saved by 4 (one empty)", TensorPlan{Name: "w", Shape: []int{3}, Slices: evenSlices(3, 4)}, []int{2}},
		{"replicated on 3 ranks", TensorPlan{Name: "w", Shape: []int{2, 3}, Slices: []Slice{{2, 0, 6}, {0, 0, 6}, {1, 0, 6}}}, []int{2}},
		{"overlapping pieces", TensorPlan{Name: "w", Shape: []int{9}, Slices: []Slice{{0, 0, 4}, {1, 2, 5}, {2, 3, 6}}}, []int{1, 3}},
	}
	for _, tc := range cases {
		fmt.Fprintf(&b, "# %s: %v\n", tc.name, tc.plan.Slices)
		n, _ := numElements(tc.plan.Shape, 1<<62)
		if err := checkCover(tc.plan, n, 8); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		for _, m := range tc.worlds {
			for _, want := range evenSlices(n, m) {
				pieces := planRead(tc.plan, want.Offset, want.Len)
				fmt.Fprintf(&b, "world=%d rank=%d [%d,+%d):", m, want.Rank, want.Offset, want.Len)
				var covered int64
				for _, p := range pieces {
					fmt.Fprintf(&b, " rank%d[%d,+%d]→%d", p.Rank, p.SrcOffset, p.Len, p.DstOffset)
					if p.DstOffset != covered {
						t.Errorf("%s world %d: piece %+v leaves a gap at %d", tc.name, m, p, covered)
					}
					covered += p.Len
				}
				if covered != want.Len {
					t.Errorf("%s world %d rank %d: pieces cover %d of %d", tc.name, m, want.Rank, covered, want.Len)
				}
				b.WriteByte('\n')
			}
		}
	}
	golden(t, "plans.txt", b.String())
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if string(want) != got {
		t.Errorf("%s differs (run with -update and review the diff):\n--- got\n%s--- want\n%s", path, got, want)
	}
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
