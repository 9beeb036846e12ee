//go:build !linux

package launch

import "os/exec"

// allowedCPUs: binding workers to CPUs is implemented on Linux only.
func allowedCPUs() []int { return nil }

// startOn starts cmd unbound.
func startOn(cmd *exec.Cmd, cpus []int) error { return cmd.Start() }
