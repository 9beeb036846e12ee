package zero

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata goldens")

// TestPlanShardsGolden renders shard plans for a table of layouts into
// testdata/shard.txt (-update rewrites it; review the diff) and checks
// the plan's invariants for each.
func TestPlanShardsGolden(t *testing.T) {
	cases := []struct {
		name    string
		numel   []int
		buckets [][]int
		world   int
	}{
		{"one rank", []int{10, 3}, [][]int{{1, 0}}, 1},
		{"two ranks, sizes not divisible", []int{10, 3, 7}, [][]int{{2, 1}, {0}}, 2},
		{"three ranks, one parameter spans all shards", []int{100}, [][]int{{0}}, 3},
		{"four ranks, tiny parameters", []int{1, 1, 1}, [][]int{{2, 1, 0}}, 4},
		{"empty parameter and frozen one", []int{0, 5, 9}, [][]int{{2, 0}}, 2},
		{"anchor LeNet, reverse order, one bucket, world 3", []int{150, 6, 2400, 16, 48000, 120, 10080, 84, 840, 10}, [][]int{{9, 8, 7, 6, 5, 4, 3, 2, 1, 0}}, 3},
		{"world 7, 1000 elements", []int{1000}, [][]int{{0}}, 7},
	}
	var out strings.Builder
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p, err := PlanShards(c.numel, c.buckets, c.world)
			if err != nil {
				t.Fatal(err)
			}
			if err := checkPlan(p); err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(&out, "# %s\nnumel %v buckets %v world %d\n%s\n", c.name, c.numel, c.buckets, c.world, p)
		})
	}
	path := filepath.Join("testdata", "shard.txt")
	if *update {
		if err := os.WriteFile(path, []byte(out.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if out.String() != string(want) {
		t.Errorf("shard plans differ from %s (run with -update and review the diff):\n%s", path, out.String())
	}
}

// checkPlan verifies the invariants of Plan's documentation, and that the
// ranks' pieces cover every parameter exactly once.
func checkPlan(p Plan) error {
	end := 0
	for k, b := range p.Buckets {
		if b.Start != end || (b.End-b.Start)%(Align*p.World) != 0 || b.Shard*p.World != b.End-b.Start || b.Shard%Align != 0 {
			return fmt.Errorf("bucket %d: %+v breaks the layout invariants", k, b)
		}
		end = b.End
	}
	covered := make([]int, len(p.Numel))
	for r := range p.World {
		for _, pc := range p.Pieces(r) {
			lo, hi := p.Buckets[pc.Bucket].ShardRange(r)
			if pc.Flat < lo || pc.Flat+pc.Len > hi || pc.Flat != p.Offset[pc.Param]+pc.Lo {
				return fmt.Errorf("rank %d: piece %+v outside its shard [%d,%d)", r, pc, lo, hi)
			}
			covered[pc.Param] += pc.Len
		}
	}
	for i, n := range p.Numel {
		if p.Offset[i] >= 0 && covered[i] != n {
			return fmt.Errorf("parameter %d: pieces cover %d of %d elements", i, covered[i], n)
		}
	}
	return nil
}

func TestPlanShardsErrors(t *testing.T) {
	tests := []struct {
		name    string
		numel   []int
		buckets [][]int
		world   int
		want    string
	}{
		{"world 0", []int{1}, [][]int{{0}}, 0, "world size 0"},
		{"index out of range", []int{1}, [][]int{{1}}, 2, "names parameter 1"},
		{"twice", []int{1, 2}, [][]int{{0}, {0}}, 2, "listed twice"},
		{"negative", []int{-1}, [][]int{{0}}, 2, "negative size"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := PlanShards(tt.numel, tt.buckets, tt.world)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want %q", err, tt.want)
			}
		})
	}
}
