package rendezvous_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/cohortml/cohort/distributed/rendezvous"
)

func TestExpandNodeList(t *testing.T) {
	tests := []struct {
		list string
		want []string
	}{
		{"n1", []string{"n1"}},
		{"n[01-03,07],gpu5", []string{"n01", "n02", "n03", "n07", "gpu5"}},
		{"a,b,c", []string{"a", "b", "c"}},
		{"node[8-11]", []string{"node8", "node9", "node10", "node11"}},
		{"x[009-011]", []string{"x009", "x010", "x011"}},
		{"r[1-2]n[1-2]", []string{"r1n1", "r1n2", "r2n1", "r2n2"}},
		{"c[1-2]-ib", []string{"c1-ib", "c2-ib"}},
		{"h[3], h[1]", []string{"h3", "h1"}},
		{"gpu-a100-[0-1],cpu[5]", []string{"gpu-a100-0", "gpu-a100-1", "cpu5"}},
	}
	for _, tc := range tests {
		t.Run(tc.list, func(t *testing.T) {
			got, err := rendezvous.ExpandNodeList(tc.list)
			if err != nil {
				t.Fatalf("ExpandNodeList: %v", err)
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("ExpandNodeList(%q) = %q; want %q", tc.list, got, tc.want)
			}
			first, err := rendezvous.FirstNode(tc.list)
			if err != nil || first != tc.want[0] {
				t.Fatalf("FirstNode(%q) = %q, %v; want %q", tc.list, first, err, tc.want[0])
			}
		})
	}
}

func TestExpandNodeListErrors(t *testing.T) {
	tests := []struct {
		list, want string
	}{
		{"", "empty"},
		{"n[1-", "unclosed"},
		{"n[]", "empty brackets"},
		{"n[3-1]", "bad range"},
		{"n[a-b]", "bad range"},
		{"n[1-2", "unclosed"},
		{"n1]", "bad host"},
		{"a,,b", "empty entry"},
		{"n[0-99999999]", "more than"},
		{"a[0-999]b[0-999]", "more than"},
	}
	for _, tc := range tests {
		t.Run(tc.list, func(t *testing.T) {
			got, err := rendezvous.ExpandNodeList(tc.list)
			if err == nil {
				t.Fatalf("ExpandNodeList(%q) = %q; want an error", tc.list, got)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not contain %q", err, tc.want)
			}
		})
	}
}

func TestExpandTasksPerNode(t *testing.T) {
	tests := []struct {
		in   string
		want []int
		bad  bool
	}{
		{in: "2(x3),1", want: []int{2, 2, 2, 1}},
		{in: "4", want: []int{4}},
		{in: "1,2,3", want: []int{1, 2, 3}},
		{in: "2(x", bad: true},
		{in: "0", bad: true},
		{in: "2(y3)", bad: true},
		{in: "", bad: true},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			got, err := rendezvous.ExpandTasksPerNode(tc.in)
			if tc.bad {
				if err == nil {
					t.Fatalf("ExpandTasksPerNode(%q) = %v; want an error", tc.in, got)
				}
				return
			}
			if err != nil || !slices.Equal(got, tc.want) {
				t.Fatalf("ExpandTasksPerNode(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
			}
		})
	}
}

// FuzzExpandNodeList: no panic, bounded output, and every accepted list's
// first host agrees with FirstNode.
func FuzzExpandNodeList(f *testing.F) {
	for _, s := range []string{"n[01-03,07],gpu5", "r[1-2]n[1-2]", "a,b", "x[0-99999]"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, list string) {
		hosts, err := rendezvous.ExpandNodeList(list)
		if err != nil {
			return
		}
		if len(hosts) == 0 || len(hosts) > 1<<16 {
			t.Fatalf("ExpandNodeList(%q) returned %d hosts", list, len(hosts))
		}
		first, err := rendezvous.FirstNode(list)
		if err != nil || first != hosts[0] {
			t.Fatalf("FirstNode(%q) = %q, %v; ExpandNodeList's first is %q", list, first, err, hosts[0])
		}
	})
}
