package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/cohortml/cohort/obs/trace"
)

func TestTraceMerge(t *testing.T) {
	dir := t.TempDir()
	for rank := range 2 {
		tr, err := trace.Open(dir, rank)
		if err != nil {
			t.Fatal(err)
		}
		tr.Begin(trace.Compute, "forward").End()
		tr.Close()
	}
	out := filepath.Join(t.TempDir(), "all.json")
	if code := runTrace([]string{"merge", dir, "-o", out}); code != 0 {
		t.Fatalf("exit %d", code)
	}
	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ev, err := trace.Read(f, out)
	if err == nil {
		err = trace.Validate(ev)
	}
	if err != nil {
		t.Fatal(err)
	}
	if code := runTrace([]string{"merge"}); code != 2 {
		t.Errorf("merge without DIR: exit %d, want 2", code)
	}
}
