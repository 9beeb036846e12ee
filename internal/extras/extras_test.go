package extras

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestTestsExist: every test the list names is declared in its package's
// test files, so that renaming or removing one fails here instead of
// leaving the list wrong.
func TestTestsExist(t *testing.T) {
	root := filepath.Join("..", "..")
	var names []string
	for _, e := range List() {
		if e.Name == "" || e.Use == "" || e.Install == "" || e.find == nil {
			t.Errorf("extra %+v: want a name, a use, how to install it and a finder", e)
		}
		names = append(names, e.Tests...)
	}
	for _, g := range Gates() {
		if !strings.Contains(g.Var, "=") || len(g.Tests) == 0 {
			t.Errorf("gate %+v: want NAME=VALUE and its tests", g)
		}
		names = append(names, g.Tests...)
	}
	for _, n := range names {
		dir, fn, ok := strings.Cut(n, ".")
		fn, _, _ = strings.Cut(fn, "/") // a subtest: its test function
		if !ok || !strings.HasPrefix(fn, "Test") {
			t.Errorf("%q: want dir.TestName", n)
			continue
		}
		files, err := filepath.Glob(filepath.Join(root, filepath.FromSlash(dir), "*_test.go"))
		if err != nil || len(files) == 0 {
			t.Errorf("%s: no test files in %s", n, dir)
			continue
		}
		found := false
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			if prefix, ok := strings.CutSuffix(fn, "*"); ok && strings.Contains(string(b), "\nfunc "+prefix) ||
				strings.Contains(string(b), "\nfunc "+fn+"(t *testing.T) {") {
				found = true
				break
			}
		}
		if !found {
			t.Errorf("%s: no func %s(t *testing.T) in %s/*_test.go", n, fn, dir)
		}
	}
}

// TestFind: each extra is either found with a place or absent with a
// reason, and a library that cannot exist is absent.
func TestFind(t *testing.T) {
	for _, s := range Find(t.Context()) {
		if (s.Err == nil) == (s.Where == "") {
			t.Errorf("%s: where %q, err %v: want exactly one", s.Name, s.Where, s.Err)
		}
	}
	if where, err := library("", "libcohort-no-such-library.so.0")(context.Background()); err == nil || where != "" || !strings.Contains(err.Error(), "libcohort-no-such-library.so.0") {
		t.Errorf("a missing library: %q, %v; want an error naming it", where, err)
	}
	t.Setenv("COHORT_EXTRAS_TEST_LIB", "libcohort-no-such-library.so.1")
	if _, err := library("COHORT_EXTRAS_TEST_LIB", "libc.so.6")(context.Background()); err == nil || !strings.Contains(err.Error(), "so.1") {
		t.Errorf("the variable's library was not the one tried: %v", err)
	}
}
