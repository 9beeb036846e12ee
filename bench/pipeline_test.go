package bench

import "testing"

// Bad input is a usage error (exit 2) before any worker starts.
func TestBenchPipelineBadInput(t *testing.T) {
	cases := map[string][]string{
		"more stages than layers":         {"--stages", "8", "--microbatches", "8"},
		"microbatches do not divide":      {"--stages", "2", "--microbatches", "5", "--batch", "32"},
		"unknown schedule":                {"--schedule", "zigzag"},
		"unknown schedule in a list":      {"--schedule", "1f1b,zigzag"},
		"a schedule listed twice":         {"--schedule", "zb,1f1b,zb"},
		"a worker with two schedules":     {"--schedule", "1f1b,zb", "--worker"},
		"interleaved needs a multiple":    {"--schedule", "interleaved", "--stages", "2", "--microbatches", "3", "--batch", "3"},
		"no timed steps":                  {"--steps", "0"},
		"no rounds":                       {"--rounds", "0"},
		"negative gomaxprocs":             {"--gomaxprocs", "-1"},
		"stray argument":                  {"extra"},
		"interleaved beyond the 4 layers": {"--schedule", "interleaved", "--stages", "4", "--microbatches", "4"},
	}
	for name, args := range cases {
		t.Run(name, func(t *testing.T) {
			if code := Pipeline(nil, args); code != 2 {
				t.Errorf("Pipeline(%q) = %d, want 2", args, code)
			}
		})
	}
}
