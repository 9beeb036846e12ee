package zero

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
)

// TestPlanShardsGolden renders shard plans for the layouts in the
// datadriven transcript testdata/shard.txt (go test -rewrite rewrites it;
// review the diff) and checks the plan's invariants for each. A directive
// gives the world size, and its input the parameter sizes and the buckets
// (parameter indices in order), one per line:
//
//	shard world=N
//	numel N…
//	bucket I…
func TestPlanShardsGolden(t *testing.T) {
	datadriven.RunTest(t, filepath.Join("testdata", "shard.txt"), func(t *testing.T, d *datadriven.TestData) string {
		if d.Cmd != "shard" {
			d.Fatalf(t, "unknown command %q (want shard)", d.Cmd)
		}
		var world int
		d.ScanArgs(t, "world", &world)
		var numel []int
		var buckets [][]int
		for line := range strings.Lines(d.Input) {
			f := strings.Fields(line)
			if len(f) == 0 {
				continue
			}
			ints := make([]int, len(f)-1)
			for i, v := range f[1:] {
				n, err := strconv.Atoi(v)
				if err != nil {
					d.Fatalf(t, "line %q: %v", line, err)
				}
				ints[i] = n
			}
			switch f[0] {
			case "numel":
				numel = ints
			case "bucket":
				buckets = append(buckets, ints)
			default:
				d.Fatalf(t, "unexpected line %q (want numel or bucket)", line)
			}
		}
		p, err := PlanShards(numel, buckets, world)
		if err != nil {
			d.Fatalf(t, "%v", err)
		}
		if err := checkPlan(p); err != nil {
			d.Fatalf(t, "%v", err)
		}
		return p.String()
	})
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
