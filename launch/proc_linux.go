package launch

import "syscall"

// sysProcAttr puts each worker in its own process group (so the launcher
// can signal the worker and everything it started at once) and asks the
// kernel to SIGKILL the worker if the launcher dies without cleaning up.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
