package launchtest

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Children returns the pids of pid's child processes (Linux: from
// /proc; none elsewhere or once pid is gone).
func Children(pid int) []int {
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	var pids []int
	for _, f := range tasks {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, w := range strings.Fields(string(b)) {
			if p, err := strconv.Atoi(w); err == nil {
				pids = append(pids, p)
			}
		}
	}
	return pids
}

// ChildWithEnv returns the child of pid whose environment holds kv
// ("RANK=1"), or false if none does.
func ChildWithEnv(pid int, kv string) (int, bool) {
	for _, child := range Children(pid) {
		env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", child))
		if err != nil {
			continue
		}
		for _, v := range bytes.Split(env, []byte{0}) {
			if string(v) == kv {
				return child, true
			}
		}
	}
	return 0, false
}
