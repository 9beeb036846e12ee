package main

import "testing"

func TestBenchGemmFlags(t *testing.T) {
	for name, args := range map[string][]string{
		"bad threads":    {"--threads", "1,x"},
		"zero threads":   {"--threads", "0"},
		"unknown shape":  {"--shapes", "128^3,nope"},
		"stray argument": {"extra"},
	} {
		t.Run(name, func(t *testing.T) {
			if code := benchGemm(args); code != 2 {
				t.Errorf("benchGemm(%q) = %d, want 2 (usage error)", args, code)
			}
		})
	}
}
