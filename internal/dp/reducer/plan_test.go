package reducer

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
)

// TestPlanBucketsGolden replays testdata/plan/plan.txt, a datadriven
// transcript: each "plan" directive gives the parameter sizes, the ready
// order and the caps as input lines (numel:, order: "reverse" or indices,
// caps: first and later bucket), and the expected plan follows "----". Run
// with -rewrite to rewrite the expectations (review the diff).
func TestPlanBucketsGolden(t *testing.T) {
	path := filepath.Join("testdata", "plan", "plan.txt")
	n := 0
	datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
		if d.Cmd != "plan" {
			d.Fatalf(t, "unknown command %q (want plan)", d.Cmd)
		}
		n++
		var c planCase
		for line := range strings.Lines(d.Input) {
			key, val, ok := strings.Cut(strings.TrimSpace(line), ":")
			val = strings.TrimSpace(val)
			switch {
			case !ok:
				d.Fatalf(t, "unexpected line %q (want numel:, order: or caps:)", line)
			case key == "numel":
				c.numel = val
			case key == "order":
				c.order = val
			case key == "caps":
				c.caps = val
			default:
				d.Fatalf(t, "unexpected line %q (want numel:, order: or caps:)", line)
			}
		}
		return c.run()
	})
	if n < 5 {
		t.Fatalf("%s: %d cases, want ≥ 5", path, n)
	}
}

type planCase struct {
	numel, order, caps string
}

func (c planCase) run() string {
	numel, err1 := parseInts(c.numel)
	caps, err3 := parseInts(c.caps)
	var order []int
	var err2 error
	if c.order == "reverse" {
		for i := len(numel) - 1; i >= 0; i-- {
			order = append(order, i)
		}
	} else {
		order, err2 = parseInts(c.order)
	}
	for _, err := range []error{err1, err2, err3} {
		if err != nil {
			return "parse error: " + err.Error() + "\n"
		}
	}
	if len(caps) != 2 {
		return "parse error: caps needs 2 values\n"
	}
	p, err := PlanBuckets(numel, order, int64(caps[0]), int64(caps[1]))
	if err != nil {
		return "error: " + err.Error() + "\n"
	}
	if err := p.check(numel); err != nil {
		return "invariant broken: " + err.Error() + "\n"
	}
	return p.String() + fmt.Sprintf("offsets %v\n", p.Offset)
}

func parseInts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Fields(s) {
		v, err := strconv.Atoi(f)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

// check verifies the Plan invariants against the parameter sizes.
func (p Plan) check(numel []int) error {
	next := 0
	for i, b := range p.Buckets {
		if b.Start != next {
			return fmt.Errorf("bucket %d starts at %d, want %d", i, b.Start, next)
		}
		for _, idx := range b.Params {
			if p.Offset[idx] != next {
				return fmt.Errorf("parameter %d at %d, want %d", idx, p.Offset[idx], next)
			}
			if next%gradAlign != 0 {
				return fmt.Errorf("parameter %d at %d: not 64-byte aligned", idx, next)
			}
			next = alignUp(next + numel[idx])
		}
		if b.End != next {
			return fmt.Errorf("bucket %d ends at %d, want %d", i, b.End, next)
		}
		var sum int64
		for _, idx := range b.Params {
			sum += int64(numel[idx]) * gradElemBytes
		}
		if sum != b.ParamBytes {
			return fmt.Errorf("bucket %d: ParamBytes %d, parameters have %d", i, b.ParamBytes, sum)
		}
		// Only the last parameter may take a bucket to or past its cap.
		if len(b.Params) > 1 {
			last := b.Params[len(b.Params)-1]
			if sum-int64(numel[last])*gradElemBytes >= b.CapBytes {
				return fmt.Errorf("bucket %d reached its cap before its last parameter", i)
			}
		}
		if i < len(p.Buckets)-1 && b.ParamBytes < b.CapBytes {
			return fmt.Errorf("bucket %d closed below its cap", i)
		}
	}
	return nil
}

func TestPlanBucketsErrors(t *testing.T) {
	tests := []struct {
		name  string
		numel []int
		order []int
		first int64
		cap   int64
		want  string
	}{
		{"index out of range", []int{1, 2}, []int{2}, 4, 4, "names parameter 2 of 2"},
		{"negative index", []int{1, 2}, []int{-1}, 4, 4, "names parameter -1 of 2"},
		{"repeated index", []int{1, 2}, []int{1, 0, 1}, 4, 4, "lists parameter 1 twice"},
		{"zero first cap", []int{1}, []int{0}, 0, 4, "caps must be positive"},
		{"negative cap", []int{1}, []int{0}, 4, -1, "caps must be positive"},
		{"negative size", []int{-3}, []int{0}, 4, 4, "negative size"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := PlanBuckets(tt.numel, tt.order, tt.first, tt.cap)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want one containing %q", err, tt.want)
			}
		})
	}
}

func TestCompleteOrder(t *testing.T) {
	tests := []struct {
		name           string
		observed, want []int
		out            []int
	}{
		{"all observed", []int{2, 0, 1}, []int{2, 1, 0}, []int{2, 0, 1}},
		{"unused go last", []int{3, 1}, []int{3, 2, 1, 0}, []int{3, 1, 2, 0}},
		{"none observed", nil, []int{1, 0}, []int{1, 0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := CompleteOrder(tt.observed, tt.want)
			if fmt.Sprint(got) != fmt.Sprint(tt.out) {
				t.Fatalf("completeOrder = %v, want %v", got, tt.out)
			}
		})
	}
}
