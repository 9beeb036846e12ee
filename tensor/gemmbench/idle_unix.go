//go:build unix

package gemmbench

import (
	"syscall"
	"time"
)

// hasProcessCPU says whether processCPU works here.
const hasProcessCPU = true

// processCPU returns the user plus system CPU time of the whole process.
func processCPU() (time.Duration, bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}
