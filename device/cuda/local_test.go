package cuda

import (
	"strings"
	"testing"
)

// TestLocalOrdinal: LOCAL_RANK picks the GPU among the visible ones; a
// local rank beyond them, or a malformed one, is an error naming the
// counts and CUDA_VISIBLE_DEVICES.
func TestLocalOrdinal(t *testing.T) {
	for _, tc := range []struct {
		env   map[string]string
		count int
		want  int
		err   string
	}{
		{env: nil, count: 2, want: 0},
		{env: map[string]string{"LOCAL_RANK": "1"}, count: 2, want: 1},
		{env: map[string]string{"LOCAL_RANK": "2"}, count: 2, err: "local rank 2 has no GPU of its own (2 visible)"},
		{env: map[string]string{"LOCAL_RANK": "1", "CUDA_VISIBLE_DEVICES": "3"}, count: 1, err: `(1 visible, CUDA_VISIBLE_DEVICES="3")`},
		{env: map[string]string{"LOCAL_RANK": "x"}, count: 2, err: `LOCAL_RANK="x"`},
		{env: nil, count: 0, err: "no GPU visible"},
	} {
		got, err := LocalOrdinal(func(k string) string { return tc.env[k] }, tc.count)
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("LocalOrdinal(%v, %d) = %d, %v; want an error containing %q", tc.env, tc.count, got, err, tc.err)
		case tc.err == "" && (err != nil || got != tc.want):
			t.Errorf("LocalOrdinal(%v, %d) = %d, %v; want %d", tc.env, tc.count, got, err, tc.want)
		}
	}
}
