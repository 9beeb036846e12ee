package affinity

import (
	"runtime"
	"slices"
	"testing"
)

// TestAllowed: on Linux the list is sorted, free of repeats and as long
// as runtime.NumCPU() (which Go reads from the same mask at start).
func TestAllowed(t *testing.T) {
	cpus := Allowed()
	if runtime.GOOS != "linux" {
		if cpus != nil {
			t.Fatalf("Allowed() = %v off Linux, want nil", cpus)
		}
		return
	}
	if len(cpus) != runtime.NumCPU() || !slices.IsSorted(cpus) || len(slices.Compact(slices.Clone(cpus))) != len(cpus) {
		t.Fatalf("Allowed() = %v; runtime.NumCPU() = %d", cpus, runtime.NumCPU())
	}
}
