//go:build !unix

package gemmbench

import "time"

// hasProcessCPU says whether processCPU works here.
const hasProcessCPU = false

// processCPU is unavailable here; WaitIdle then does not wait.
func processCPU() (time.Duration, bool) { return 0, false }
