package launch

import (
	"fmt"
	"strconv"
	"strings"
)

// CPUBind says whether the launcher binds each worker to its own share of
// the node's CPUs.
type CPUBind string

const (
	// BindAuto (also the zero value) binds when there is more than one
	// worker on the node and they do not outnumber the CPUs the launcher
	// may run on: local rank i runs on the i-th of NProcPerNode equal,
	// contiguous blocks of those CPUs (the first NumCPU of them), as
	// mpirun's default binding to cores does. An oversubscribed node is
	// left to the kernel's balancing.
	BindAuto CPUBind = "auto"
	// BindNone never binds.
	BindNone CPUBind = "none"
)

// The zero Config.CPUBind takes the launcher's COHORT_CPU_BIND (auto or
// none) where it is set, so that programs which start their workers
// through Run (cohort's benchmarks) can be told too.

// ParseCPUBind parses the value of cohort run's --cpu-bind.
func ParseCPUBind(s string) (CPUBind, error) {
	switch b := CPUBind(s); b {
	case "", BindAuto:
		return BindAuto, nil
	case BindNone:
		return BindNone, nil
	}
	return "", fmt.Errorf("launch: --cpu-bind %q: want auto or none", s)
}

// cpuBlocks splits cpus into n contiguous blocks whose sizes differ by at
// most one (the larger first), or returns nil when there are fewer CPUs
// than blocks.
func cpuBlocks(cpus []int, n int) [][]int {
	if n < 1 || len(cpus) < n {
		return nil
	}
	blocks := make([][]int, n)
	at := 0
	for i := range blocks {
		size := len(cpus) / n
		if i < len(cpus)%n {
			size++
		}
		blocks[i] = cpus[at : at+size : at+size]
		at += size
	}
	return blocks
}

// formatCPUs writes a CPU list as ranges: "0-3,8,10-11".
func formatCPUs(cpus []int) string {
	var b strings.Builder
	for i := 0; i < len(cpus); {
		j := i
		for j+1 < len(cpus) && cpus[j+1] == cpus[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(cpus[i]))
		if j > i {
			b.WriteString("-" + strconv.Itoa(cpus[j]))
		}
		i = j + 1
	}
	return b.String()
}
