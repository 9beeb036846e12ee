package cli

import (
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		name   string
		args   []string
		status int
		ok     bool
		out    []string // what the output must contain
	}{
		{"flags", []string{"-n", "3", "x"}, 0, true, nil},
		{"help", []string{"-h"}, 0, false, []string{"usage: cohort demo", "-n int"}},
		{"bad flag", []string{"-m"}, 2, false, []string{"-m", "usage: cohort demo"}},
		{"bad value", []string{"-n", "x"}, 2, false, []string{`invalid value "x"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out strings.Builder
			fs := NewFlagSet("cohort demo", "usage: cohort demo [flags]\n", &out)
			n := fs.Int("n", 1, "a count")
			status, ok := Parse(fs, tc.args)
			if status != tc.status || ok != tc.ok {
				t.Fatalf("Parse(%q) = %d, %v; want %d, %v", tc.args, status, ok, tc.status, tc.ok)
			}
			if ok && (*n != 3 || fs.NArg() != 1) {
				t.Errorf("Parse(%q): n = %d, %d arguments left", tc.args, *n, fs.NArg())
			}
			for _, s := range tc.out {
				if !strings.Contains(out.String(), s) {
					t.Errorf("Parse(%q) printed %q, want it to contain %q", tc.args, out.String(), s)
				}
			}
			if tc.out == nil && out.Len() > 0 {
				t.Errorf("Parse(%q) printed %q, want nothing", tc.args, out.String())
			}
		})
	}
}

func TestParseFlags(t *testing.T) {
	for _, tc := range []struct {
		name   string
		args   []string
		status int
		ok     bool
		out    string // what the output must contain ("": nothing)
	}{
		{"flags only", []string{"-n", "3"}, 0, true, ""},
		{"none", nil, 0, true, ""},
		{"help", []string{"-h"}, 0, false, "usage: cohort demo"},
		{"bad flag", []string{"-m"}, 2, false, "-m"},
		{"arguments", []string{"-n", "3", "x", "y"}, 2, false, `cohort demo: unexpected arguments ["x" "y"]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out strings.Builder
			fs := NewFlagSet("cohort demo", "usage: cohort demo [flags]\n", &out)
			fs.Int("n", 1, "a count")
			status, ok := ParseFlags(fs, tc.args)
			if status != tc.status || ok != tc.ok {
				t.Fatalf("ParseFlags(%q) = %d, %v; want %d, %v", tc.args, status, ok, tc.status, tc.ok)
			}
			if tc.out == "" && out.Len() > 0 || !strings.Contains(out.String(), tc.out) {
				t.Errorf("ParseFlags(%q) printed %q, want %q in it", tc.args, out.String(), tc.out)
			}
		})
	}
}
