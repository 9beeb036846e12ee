package checkpoint

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Leftovers. writeAtomic writes through a temporary file named
// ".<name>.tmp-<pid>@<host>-<random>" beside its target; a process killed
// while it writes leaves that file behind. Save (rank 0, before writing)
// and Find (every load) remove the temporary files of dir and of its step
// directories that no one is writing any more: those of a process of this
// host that has exited, and any not modified for staleTempAge (a writer
// on another host of a shared file system, or a pid that was reused). A
// file being written is modified every megabyte, so it is never that old.

// staleTempAge is how long a temporary file must have gone unmodified to
// be taken for the leftover of a writer on another host.
const staleTempAge = 5 * time.Minute

// tempPattern is the os.CreateTemp pattern for a temporary file of base.
func tempPattern(base string) string {
	return "." + base + ".tmp-" + strconv.Itoa(os.Getpid()) + "@" + hostTag() + "-*"
}

// hostTag is this host's name, cut to 32 characters of [A-Za-z0-9.-].
func hostTag() string {
	h, _ := os.Hostname()
	var b strings.Builder
	for _, r := range h {
		if b.Len() == 32 {
			break
		}
		if r == '.' || r == '-' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' {
			b.WriteRune(r)
		}
	}
	return b.String()
}

// tempOwner parses the pid and host of a temporary file's name; ok is
// false for a name that is not one (or of an older writer without them).
func tempOwner(name string) (pid int, host string, ok bool) {
	if !strings.HasPrefix(name, ".") {
		return 0, "", false
	}
	_, rest, found := strings.Cut(name, ".tmp-")
	if !found {
		return 0, "", false
	}
	p, rest, found := strings.Cut(rest, "@")
	if !found {
		return 0, "", false
	}
	pid, err := strconv.Atoi(p)
	if err != nil || pid <= 0 {
		return 0, "", false
	}
	i := strings.LastIndexByte(rest, '-')
	if i < 0 {
		return 0, "", false
	}
	return pid, rest[:i], true
}

// isTemp reports whether name is a temporary file of writeAtomic (also
// one of an older version, without its owner).
func isTemp(name string) bool {
	return strings.HasPrefix(name, ".") && strings.Contains(name, ".tmp-")
}

// removeStaleTemps removes the leftover temporary files (see above) of
// dir and its step directories and returns the paths removed. A file
// that vanishes meanwhile (another rank removed it) is not an error.
func removeStaleTemps(dir string, now time.Time) ([]string, error) {
	dirs := []string{dir}
	steps, err := stepDirs(dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	for _, st := range steps {
		dirs = append(dirs, StepDir(dir, st))
	}
	me := hostTag()
	var removed []string
	var errs []error
	for _, d := range dirs {
		ents, err := os.ReadDir(d)
		if err != nil {
			continue // removed meanwhile, or unreadable: not ours to judge
		}
		for _, e := range ents {
			if !e.Type().IsRegular() || !isTemp(e.Name()) {
				continue
			}
			info, err := e.Info()
			if err != nil {
				continue
			}
			stale := now.Sub(info.ModTime()) >= staleTempAge
			if pid, host, ok := tempOwner(e.Name()); ok && host == me && pid != os.Getpid() && processGone(pid) {
				stale = true
			}
			if !stale {
				continue
			}
			path := filepath.Join(d, e.Name())
			if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, fmt.Errorf("checkpoint: removing leftover %s: %w", path, err))
				continue
			}
			removed = append(removed, path)
		}
	}
	return removed, errors.Join(errs...)
}
