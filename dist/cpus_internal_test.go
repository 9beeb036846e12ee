package dist

import (
	"strings"
	"testing"
)

// TestCountCPUs: the ranks on a host fit it when the union of their CPU
// masks has room for each; a rank that cannot tell its mask leaves the
// default.
func TestCountCPUs(t *testing.T) {
	for _, tc := range []struct {
		name  string
		mine  []int
		local []int
		masks []string
		want  int
		err   string
	}{
		{"bound-apart", []int{0}, []int{1}, []string{"", "1"}, 2, ""},
		{"bound-together", []int{0}, []int{1, 2}, []string{"", "0", "0"}, 1, ""},
		{"unbound", []int{0, 1, 2, 3}, []int{1}, []string{"", "0,1,2,3"}, 4, ""},
		{"mine-unknown", nil, []int{1}, []string{"", "1"}, 7, ""},
		{"peer-unknown", []int{0}, []int{1}, []string{"", ""}, 7, ""},
		{"garbage", []int{0}, []int{1}, []string{"", "1,x"}, 0, `rank 1 published the CPU list "1,x"`},
	} {
		got, err := countCPUs(tc.mine, tc.local, tc.masks, 7)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: %v, want an error containing %q", tc.name, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%s: %d, %v; want %d", tc.name, got, err, tc.want)
		}
	}
}
