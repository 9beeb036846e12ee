package launch

import (
	"context"
	"testing"
	"time"

	"github.com/cohortml/cohort/distributed/store/memstore"
)

// A published failure reaches the other nodes' watchers with its message
// and whether it is a stop after a signal; the first one published stays.
func TestPublishFailure(t *testing.T) {
	for _, tc := range []struct {
		name string
		stop bool
	}{{"failed", false}, {"stopping", true}} {
		t.Run(tc.name, func(t *testing.T) {
			st := memstore.New()
			if err := publishFailure(st, 1, "rank 3 exited with code 143", tc.stop, time.Second); err != nil {
				t.Fatal(err)
			}
			if err := publishFailure(st, 0, "rank 0 exited with code 1", false, time.Second); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			msg, stop := watchFailure(ctx, st)
			if msg != "node 1: rank 3 exited with code 143" || stop != tc.stop {
				t.Fatalf("watched %q, stop %v; want the first failure, node 1's, stop %v", msg, stop, tc.stop)
			}
		})
	}
	// a value without the kind line (an older launcher's) is a failure
	st := memstore.New()
	if err := st.Set(context.Background(), failedKey, []byte("node 2: rank 5 exited with code 1")); err != nil {
		t.Fatal(err)
	}
	if msg, stop := watchFailure(context.Background(), st); msg != "node 2: rank 5 exited with code 1" || stop {
		t.Fatalf("watched %q, stop %v; want the whole value, not a stop", msg, stop)
	}
	// ctx ending first: nothing
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if msg, _ := watchFailure(ctx, memstore.New()); msg != "" {
		t.Fatalf("watched %q after ctx ended; want \"\"", msg)
	}
}
