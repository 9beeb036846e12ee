package main

import (
	"strings"
	"testing"
)

// TestMacro checks that a block one file emits stays in place, that a
// block two files emit becomes an invocation of one definition, and that
// two different blocks under one name are refused.
func TestMacro(t *testing.T) {
	m := &macros{defs: map[string]string{}, users: map[string]map[string]bool{}, shared: map[string]bool{"TWO": true}}
	block := func(e *emitter, p []string) { e.i("MOVQ x+%s(FP), AX", p[0]) }
	a, b := &emitter{file: "a.s", m: m}, &emitter{file: "b.s", m: m}
	a.macro("ONE", []string{"OFF"}, []string{"8"}, "ONE.", block)
	a.macro("TWO", []string{"OFF"}, []string{"16"}, "TWO.", block)
	b.macro("TWO", []string{"OFF"}, []string{"24"}, "TWO.", block)
	if got, want := a.buf.String(), "\tMOVQ x+8(FP), AX\n\tTWO(16)\n"; got != want {
		t.Errorf("a.s: got %q, want %q", got, want)
	}
	if got, want := b.buf.String(), "\tTWO(24)\n"; got != want {
		t.Errorf("b.s: got %q, want %q", got, want)
	}
	if !a.usesMacros || !b.usesMacros {
		t.Errorf("usesMacros: a %v, b %v, want both", a.usesMacros, b.usesMacros)
	}
	if def := m.defs["TWO"]; !strings.Contains(def, "#define TWO(OFF) \\\n\tMOVQ x+OFF(FP), AX\n") {
		t.Errorf("TWO's definition: %q", def)
	}
	if len(m.users["TWO"]) != 2 || len(m.users["ONE"]) != 1 {
		t.Errorf("users: %v", m.users)
	}
	defer func() {
		if recover() == nil {
			t.Error("a second, different block for TWO was not refused")
		}
	}()
	b.macro("TWO", []string{"OFF"}, []string{"24"}, "TWO.", func(e *emitter, p []string) { e.i("MOVQ y+%s(FP), AX", p[0]) })
}
