package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The README section this program is shown in, and the lines of it the
// test relies on.
const (
	readmeSection = "## Your own training program"
	readmeReplace = "replace github.com/cohortml/cohort => ../cohort"
	readmeRun     = "go tool cohort run --nproc-per-node 2 ."
)

// TestOwnModule follows the README's "Your own training program" as its
// reader would, in a fresh module outside this one: go.mod is the README's
// (its replace pointing at this checkout), main.go is this file's package,
// which the README must show verbatim, and the program runs under the
// README's `go tool cohort run --nproc-per-node 2 .` and must train.
//
// Where the README says `go mod tidy`, the test runs `go list -mod=mod .
// tool`, which adds the same requirements for building: tidy also resolves
// the tests of dependencies (progressbar's use of testify), which a module
// cache filled by this module's own build and tests need not hold, and
// the test must pass with GOPROXY=off on such a machine. The checkout's
// go.sum seeds the new module's, so that no checksum has to be looked up.
func TestOwnModule(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a module and starts two processes")
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	gomod, program := readmeBlocks(t, filepath.Join(root, "README.md"))
	mainGo, err := os.ReadFile("main.go")
	if err != nil {
		t.Fatal(err)
	}
	if program != string(mainGo) {
		t.Fatalf("README.md's main.go differs from examples/mytrainer/main.go: copy the file into the README's go block")
	}
	if !strings.Contains(gomod, readmeReplace+"\n") {
		t.Fatalf("README.md's go.mod has no line %q:\n%s", readmeReplace, gomod)
	}
	gomod = strings.Replace(gomod, readmeReplace, "replace github.com/cohortml/cohort => "+root, 1)
	gosum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	for name, text := range map[string][]byte{"go.mod": []byte(gomod), "go.sum": gosum, "main.go": mainGo} {
		if err := os.WriteFile(filepath.Join(dir, name), text, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	run := func(timeout time.Duration, args ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), timeout)
		defer cancel()
		cmd := exec.CommandContext(ctx, "go", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOWORK=off")
		cmd.WaitDelay = 10 * time.Second
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("go %s in a module requiring this checkout: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	run(time.Minute, "list", "-mod=mod", ".", "tool")
	out := run(3*time.Minute, append(strings.Fields(readmeRun)[1:], "-epochs", "3")...)

	// Rank 0 prints each epoch's loss, which must fall.
	re := regexp.MustCompile(`(?m)^\[rank 0\] epoch (\d+): loss ([0-9.]+) \(2 ranks\)$`)
	var losses []float64
	for _, m := range re.FindAllStringSubmatch(out, -1) {
		l, err := strconv.ParseFloat(m[2], 64)
		if err != nil {
			t.Fatal(err)
		}
		losses = append(losses, l)
	}
	if len(losses) != 3 || !(losses[2] < losses[0]) {
		t.Fatalf("want 3 epochs of rank 0 on 2 ranks with a falling loss, got %v from:\n%s", losses, out)
	}
	t.Logf("losses %v", losses)
}

// readmeBlocks returns the go.mod and the Go program shown in the README's
// section on one's own training program: the fenced block starting with
// "module " and the ```go block.
func readmeBlocks(t *testing.T, path string) (gomod, program string) {
	t.Helper()
	text, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := bytes.Cut(text, []byte("\n"+readmeSection+"\n"))
	if !ok {
		t.Fatalf("%s has no section %q", path, readmeSection)
	}
	if end := bytes.Index(section, []byte("\n## ")); end >= 0 {
		section = section[:end]
	}
	if !bytes.Contains(section, []byte(readmeRun)) {
		t.Fatalf("%s, %s: the command %q is not there", path, readmeSection, readmeRun)
	}
	fence := regexp.MustCompile("(?ms)^```([a-z.]*)\n(.*?)^```$")
	for _, m := range fence.FindAllSubmatch(section, -1) {
		switch body := string(m[2]); {
		case string(m[1]) == "go":
			program = body
		case strings.HasPrefix(body, "module "):
			gomod = body
		}
	}
	if gomod == "" || program == "" {
		t.Fatalf("%s, %s: want a go.mod block (starting with \"module \") and a go block", path, readmeSection)
	}
	return gomod, program
}
