package launch

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// The launcher's temporary directories (a built program, the workers'
// error files) are removed when Run returns. A launcher killed with
// SIGKILL cannot, so each directory's name carries its owner,
//
//	cohort-run-KIND-NS-PID-RANDOM
//
// (NS the PID namespace, PID the launcher's), and every Run first removes
// the directories of its kind whose owner, in its own PID namespace, is
// no longer alive. A directory of another namespace (a container sharing
// the temporary directory) is never touched: its PID means nothing here.

// tempPrefix is the start of the names of the launcher's temporary
// directories.
const tempPrefix = "cohort-run-"

// makeTempDir creates a temporary directory of kind ("build", "errors")
// owned by this process, after reclaiming that kind's leftovers.
func makeTempDir(kind string) (string, error) {
	tmp := os.TempDir()
	reclaimTempDirs(tmp, kind, pidNamespace(), processAlive)
	return os.MkdirTemp(tmp, tempPrefix+kind+"-"+pidNamespace()+"-"+strconv.Itoa(os.Getpid())+"-")
}

// reclaimTempDirs removes the directories of kind in dir owned by a
// process of namespace ns that alive says is gone, and returns their
// paths. Entries it cannot read or remove are left alone.
func reclaimTempDirs(dir, kind, ns string, alive func(pid int) bool) []string {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	prefix := tempPrefix + kind + "-" + ns + "-"
	var removed []string
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), prefix)
		if !ok || !e.IsDir() {
			continue
		}
		pidText, _, ok := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidText)
		if !ok || err != nil || pid <= 0 || alive(pid) {
			continue
		}
		path := filepath.Join(dir, e.Name())
		if os.RemoveAll(path) == nil {
			removed = append(removed, path)
		}
	}
	return removed
}

// processAlive reports whether pid names a process (of any user).
func processAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// pidNamespace identifies this process's PID namespace: the inode of
// /proc/self/ns/pid on Linux, "0" where there is none to read.
func pidNamespace() string {
	link, err := os.Readlink("/proc/self/ns/pid") // "pid:[4026531836]"
	if err != nil {
		return "0"
	}
	_, inode, _ := strings.Cut(link, "[")
	inode = strings.TrimSuffix(inode, "]")
	if _, err := strconv.ParseUint(inode, 10, 64); err != nil {
		return "0"
	}
	return inode
}
