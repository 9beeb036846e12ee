//go:build unix && !linux

package launch

import "syscall"

// sysProcAttr puts each worker in its own process group. Outside Linux
// there is no parent-death signal: a launcher killed with SIGKILL leaves
// its workers running.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
