//go:build unix

package checkpoint

import (
	"errors"
	"os"
	"syscall"
)

// processGone reports whether pid names no process of this host (signal
// 0 probes without signalling; a process of another user is not gone).
func processGone(pid int) bool {
	p, err := os.FindProcess(pid)
	if err != nil {
		return true
	}
	return errors.Is(p.Signal(syscall.Signal(0)), os.ErrProcessDone)
}
