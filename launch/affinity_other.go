//go:build !linux

package launch

import "os/exec"

// startOn starts cmd unbound.
func startOn(cmd *exec.Cmd, cpus []int) error { return cmd.Start() }
