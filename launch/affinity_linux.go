package launch

import (
	"os/exec"
	"runtime"

	"golang.org/x/sys/unix"
)

// startOn starts cmd bound to cpus (none: unbound). A child inherits the
// CPU mask of the thread that forks it, so the forking goroutine holds
// its thread, narrows the thread's mask to cpus for the fork and restores
// it afterwards. (Restoring the mask the thread had cannot fail short of
// CPUs going offline, and then the thread merely keeps the narrower one.)
// The thread goes back to the runtime afterwards, never exits: a worker's
// parent-death signal follows the thread that forked it.
func startOn(cmd *exec.Cmd, cpus []int) error {
	if len(cpus) == 0 {
		return cmd.Start()
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var old, set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &old); err != nil {
		return cmd.Start()
	}
	for _, c := range cpus {
		set.Set(c)
	}
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		return cmd.Start() // e.g. a CPU went offline: start unbound
	}
	err := cmd.Start()
	_ = unix.SchedSetaffinity(0, &old)
	return err
}
