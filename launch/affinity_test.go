package launch

import (
	"fmt"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/cohortml/cohort/internal/affinity"
)

func TestCPUBlocks(t *testing.T) {
	for _, tc := range []struct {
		cpus []int
		n    int
		want string
	}{
		{[]int{0, 1}, 2, "[[0] [1]]"},
		{[]int{0, 1, 2, 3, 4}, 2, "[[0 1 2] [3 4]]"},
		{[]int{0, 2, 4, 6, 8, 10, 12}, 3, "[[0 2 4] [6 8] [10 12]]"},
		{[]int{3}, 1, "[[3]]"},
		{[]int{0, 1}, 3, "[]"}, // oversubscribed: unbound
		{nil, 1, "[]"},
	} {
		if got := fmt.Sprint(cpuBlocks(tc.cpus, tc.n)); got != tc.want {
			t.Errorf("cpuBlocks(%v, %d) = %s, want %s", tc.cpus, tc.n, got, tc.want)
		}
	}
	for _, tc := range []struct {
		cpus []int
		want string
	}{{[]int{0}, "0"}, {[]int{0, 1, 2, 3}, "0-3"}, {[]int{0, 1, 2, 3, 8, 10, 11}, "0-3,8,10-11"}, {nil, ""}} {
		if got := formatCPUs(tc.cpus); got != tc.want {
			t.Errorf("formatCPUs(%v) = %q, want %q", tc.cpus, got, tc.want)
		}
	}
	for _, s := range []string{"", "auto", "none"} {
		if _, err := ParseCPUBind(s); err != nil {
			t.Errorf("ParseCPUBind(%q): %v", s, err)
		}
	}
	if _, err := ParseCPUBind("cores"); err == nil || !strings.Contains(err.Error(), `"cores"`) {
		t.Errorf("ParseCPUBind(cores): %v, want an error naming it", err)
	}
}

// parseCPUList reads a kernel CPU list ("0-3,8").
func parseCPUList(t *testing.T, s string) []int {
	t.Helper()
	var cpus []int
	for part := range strings.SplitSeq(s, ",") {
		lo, hi, ok := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		b := a
		if ok {
			b, err = strconv.Atoi(hi)
		}
		if err != nil {
			t.Fatalf("CPU list %q: %v", s, err)
		}
		for c := a; c <= b; c++ {
			cpus = append(cpus, c)
		}
	}
	return cpus
}

// TestRunCPUBind: by default each of two workers runs on its own block of
// the launcher's CPUs, with the launcher's GOMAXPROCS; with BindNone (or
// COHORT_CPU_BIND=none and no setting) both may run on all of them and
// Go picks their GOMAXPROCS.
func TestRunCPUBind(t *testing.T) {
	allowed := affinity.Allowed()
	if len(allowed) < 2 {
		t.Skipf("binding needs 2 CPUs; this process may use %v", allowed)
	}
	line := regexp.MustCompile(`(?m)^\[rank (\d)\] (CPUS|GOMAXPROCS)=(.*)$`)
	workers := func(t *testing.T, cfg Config) (cpus [2][]int, procs [2]string) {
		t.Helper()
		out, _ := runOK(t, cfg)
		for _, m := range line.FindAllStringSubmatch(out, -1) {
			r, _ := strconv.Atoi(m[1])
			if m[2] == "CPUS" {
				cpus[r] = parseCPUList(t, m[3])
			} else {
				procs[r] = m[3]
			}
		}
		return cpus, procs
	}
	t.Run("auto", func(t *testing.T) {
		cpus, procs := workers(t, testConfig(2, "env"))
		blocks := cpuBlocks(allowed, 2)
		for r := range 2 {
			if !slices.Equal(cpus[r], blocks[r]) {
				t.Errorf("rank %d runs on %v, want %v (of %v)", r, cpus[r], blocks[r], allowed)
			}
			if want := strconv.Itoa(runtime.GOMAXPROCS(0)); procs[r] != want {
				t.Errorf("rank %d: GOMAXPROCS %s, want the launcher's %s", r, procs[r], want)
			}
		}
		// The launcher's own threads are as they were.
		if got := affinity.Allowed(); !slices.Equal(got, allowed) {
			t.Errorf("after starting the workers the launcher may run on %v, before on %v", got, allowed)
		}
	})
	for _, how := range []string{"config", "env"} {
		t.Run("none-"+how, func(t *testing.T) {
			cfg := testConfig(2, "env")
			if how == "config" {
				cfg.CPUBind = BindNone
			} else {
				t.Setenv("COHORT_CPU_BIND", "none")
			}
			cpus, procs := workers(t, cfg)
			for r := range 2 {
				if !slices.Equal(cpus[r], allowed) {
					t.Errorf("rank %d runs on %v, want every CPU of %v", r, cpus[r], allowed)
				}
				if want := strconv.Itoa(runtime.GOMAXPROCS(0)); procs[r] != want {
					t.Errorf("rank %d: GOMAXPROCS %s, want Go's default, as the launcher's %s", r, procs[r], want)
				}
			}
		})
	}
}
