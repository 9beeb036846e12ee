package distributed_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/cohortml/cohort/distributed"
)

// TestUnknownBackend: a backend name nobody registered is an error naming
// it (and, from the environment, the variable), not a fallback.
func TestUnknownBackend(t *testing.T) {
	_, err := distributed.Init(context.Background(), distributed.Options{Backend: "gloo", WorldSize: 1})
	if err == nil || !strings.Contains(err.Error(), `unknown backend "gloo"`) {
		t.Errorf("Init(Backend gloo) = %v, want an error naming the backend", err)
	}
	t.Setenv("COHORT_BACKEND", "nccl")
	_, err = distributed.InitFromEnv(context.Background())
	if err == nil || !strings.Contains(err.Error(), `COHORT_BACKEND="nccl"`) {
		t.Errorf("InitFromEnv with COHORT_BACKEND=nccl = %v, want an error naming the variable", err)
	}
}

// TestRegister: a registered backend is what Init calls, with the
// caller's options; an unknown name's error says how a backend is linked
// in; a second registration of a name panics.
func TestRegister(t *testing.T) {
	_, err := distributed.Init(context.Background(), distributed.Options{Backend: "nosuch", WorldSize: 1})
	if err == nil || !strings.Contains(err.Error(), `unknown backend "nosuch"`) || !strings.Contains(err.Error(), "distributed/backend/all") {
		t.Errorf("Init(Backend nosuch) = %v, want an error naming the backend and the import that links the others", err)
	}
	var got distributed.Options
	distributed.Register("fake", distributed.Backend{Init: func(_ context.Context, opts distributed.Options) (distributed.ProcessGroup, error) {
		got = opts
		return nil, nil
	}})
	if _, err := distributed.Init(context.Background(), distributed.Options{Backend: "fake", Rank: 2, WorldSize: 3}); err != nil {
		t.Fatal(err)
	}
	if got.Backend != "fake" || got.Rank != 2 || got.WorldSize != 3 {
		t.Errorf("the backend got %+v, want Backend fake, Rank 2, WorldSize 3", got)
	}
	if names := distributed.Backends(); !slices.Contains(names, "fake") || !slices.IsSorted(names) {
		t.Errorf("Backends() = %v, want a sorted list with fake", names)
	}
	defer func() {
		if p := recover(); p == nil || !strings.Contains(p.(string), `"fake" registered twice`) {
			t.Errorf("second Register(fake): panic %v, want one naming the backend", p)
		}
	}()
	distributed.Register("fake", distributed.Backend{Init: func(context.Context, distributed.Options) (distributed.ProcessGroup, error) { return nil, nil }})
}
