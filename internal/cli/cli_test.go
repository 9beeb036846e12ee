package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestParse runs Parse and, for a flags-only command, ParseFlags.
func TestParse(t *testing.T) {
	for _, tc := range []struct {
		name      string
		flagsOnly bool // ParseFlags instead of Parse
		args      []string
		status    int
		ok        bool
		out       string // what the output must contain ("": nothing)
	}{
		{"flags", false, []string{"-n", "3", "x"}, 0, true, ""},
		{"help", false, []string{"-h"}, 0, false, "usage: cohort demo [flags]\n  -n int"},
		{"bad flag", false, []string{"-m"}, 2, false, "-m"},
		{"bad value", false, []string{"-n", "x"}, 2, false, `invalid value "x"`},
		{"flags only", true, []string{"-n", "3"}, 0, true, ""},
		{"flags only, none", true, nil, 0, true, ""},
		{"flags only, help", true, []string{"-h"}, 0, false, "usage: cohort demo"},
		{"flags only, bad flag", true, []string{"-m"}, 2, false, "-m"},
		{"flags only, arguments", true, []string{"-n", "3", "x", "y"}, 2, false, `cohort demo: unexpected arguments ["x" "y"]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out strings.Builder
			fs := NewFlagSet("cohort demo", "usage: cohort demo [flags]\n", &out)
			n := fs.Int("n", 1, "a count")
			parse := Parse
			if tc.flagsOnly {
				parse = ParseFlags
			}
			status, ok := parse(fs, tc.args)
			if status != tc.status || ok != tc.ok {
				t.Fatalf("%q: status %d, ok %v; want %d, %v", tc.args, status, ok, tc.status, tc.ok)
			}
			if len(tc.args) > 0 && ok && *n != 3 {
				t.Errorf("%q: n = %d, want 3", tc.args, *n)
			}
			if tc.out == "" && out.Len() > 0 || !strings.Contains(out.String(), tc.out) {
				t.Errorf("%q printed %q, want %q in it", tc.args, out.String(), tc.out)
			}
		})
	}
}

func TestWriteJSON(t *testing.T) {
	v := map[string]int{"a": 1}
	const want = "{\n  \"a\": 1\n}\n"
	var out strings.Builder
	if err := WriteJSON("", &out, v); err != nil || out.String() != want {
		t.Errorf("WriteJSON to stdout: %q, %v; want %q", out.String(), err, want)
	}
	path := filepath.Join(t.TempDir(), "v.json")
	if err := WriteJSON(path, &out, v); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(path); err != nil || string(got) != want {
		t.Errorf("WriteJSON to %s: %q, %v; want %q", path, got, err, want)
	}
	if err := WriteJSON(path, &out, func() {}); err == nil {
		t.Error("WriteJSON of a func: want an error")
	}
}
