package checkpoint

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestStaleTempsRemoved: the temporary files of writers that were killed
// (a pid of this host that has exited, or untouched for staleTempAge) are
// removed by the next load (Find) and the next Save; those that may still
// be written (a live pid, a recent file of another host) are kept.
func TestStaleTempsRemoved(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	s := newTrainState(t, 1)
	if _, err := Save(ctx, dir, Single, s.snapshot(1), Options{}); err != nil {
		t.Fatal(err)
	}
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Skipf("no process to outlive: %v", err)
	}
	pid := func(p int) string { return strconv.Itoa(p) }
	step1, torn := StepDir(dir, 1), StepDir(dir, 2)
	os.MkdirAll(torn, 0o755)
	old := time.Now().Add(-2 * staleTempAge)
	files := []struct {
		path  string
		old   bool
		stale bool
	}{
		{filepath.Join(torn, ".rank-00000.safetensors.tmp-"+pid(dead.Process.Pid)+"@"+hostTag()+"-123"), false, true}, // its writer has exited
		{filepath.Join(torn, ".rank-00001.safetensors.tmp-"+pid(os.Getppid())+"@"+hostTag()+"-456"), false, false},    // its writer lives
		{filepath.Join(step1, ".rank-00002.safetensors.tmp-77@other-host-789"), false, false},                         // another host, recent
		{filepath.Join(step1, ".rank-00003.safetensors.tmp-77@other-host-790"), true, true},                           // another host, untouched for long
		{filepath.Join(dir, ".manifest.json.tmp-2931"), true, true},                                                   // an older writer's name, old
		{filepath.Join(dir, ".manifest.json.tmp-2932"), false, false},                                                 // the same, recent
	}
	for _, f := range files {
		if err := os.WriteFile(f.path, []byte("partial"), 0o644); err != nil {
			t.Fatal(err)
		}
		if f.old {
			os.Chtimes(f.path, old, old)
		}
	}
	check := func(when string) {
		t.Helper()
		for _, f := range files {
			_, err := os.Stat(f.path)
			if gone := errors.Is(err, fs.ErrNotExist); gone != f.stale {
				t.Errorf("%s: %s removed %v, want %v", when, filepath.Base(f.path), gone, f.stale)
			}
		}
	}
	path, step, skipped, err := Find(dir)
	if err != nil || step != 1 || path != step1 {
		t.Fatalf("Find: %q %d %v", path, step, err)
	}
	if len(skipped) != 1 || skipped[0].Step != 2 || !errors.Is(skipped[0].Reason, fs.ErrNotExist) {
		t.Errorf("skipped %v, want step 2 without a manifest", skipped)
	}
	check("after a load")
	// A new file of a dead writer: the next save removes it too.
	late := filepath.Join(step1, ".rank-00004.safetensors.tmp-"+pid(dead.Process.Pid)+"@"+hostTag()+"-999")
	os.WriteFile(late, nil, 0o644)
	if _, err := Save(ctx, dir, Single, s.snapshot(3), Options{}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(late); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a save left %s", filepath.Base(late))
	}
	// Save's own temporary files carry its pid and host.
	if p, h, ok := tempOwner(filepath.Base(tempPattern("rank-00000.safetensors"))); !ok || p != os.Getpid() || h != hostTag() {
		t.Errorf("tempPattern: pid %d host %q ok %v", p, h, ok)
	}
}

// TestFindSaysWhy: the step directories passed over on the way to the
// newest complete checkpoint are returned with the reason, so a program
// can log why it does not resume from them.
func TestFindSaysWhy(t *testing.T) {
	dir := t.TempDir()
	s := newTrainState(t, 1)
	if _, err := Save(context.Background(), dir, Single, s.snapshot(4), Options{}); err != nil {
		t.Fatal(err)
	}
	bad := StepDir(dir, 6)
	os.MkdirAll(bad, 0o755)
	os.WriteFile(filepath.Join(bad, manifestName), []byte(`{"format":"cohort-checkpoint/1","step":6`), 0o644)
	os.MkdirAll(StepDir(dir, 7), 0o755)
	path, step, skipped, err := Find(dir)
	if err != nil || step != 4 || path != StepDir(dir, 4) {
		t.Fatalf("Find: %q %d %v, want step 4", path, step, err)
	}
	var got []string
	for _, sk := range skipped {
		got = append(got, sk.String())
	}
	if len(skipped) != 2 || skipped[0].Step != 7 || skipped[1].Step != 6 || !errors.Is(skipped[1].Reason, ErrManifest) ||
		!strings.Contains(got[0], "no manifest (a save that did not finish)") || !strings.Contains(got[1], "invalid manifest") {
		t.Errorf("skipped:\n%s\nwant step 7 (no manifest) and step 6 (invalid manifest)", strings.Join(got, "\n"))
	}
	// Nothing to resume from: the reasons still come back.
	os.RemoveAll(StepDir(dir, 4))
	if _, _, skipped, err := Find(dir); !errors.Is(err, ErrNoCheckpoint) || !slices.EqualFunc(skipped, []int64{7, 6}, func(s Skipped, st int64) bool { return s.Step == st }) {
		t.Errorf("Find without a complete checkpoint: %v, skipped %v", err, skipped)
	}
}
