package distributed_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cohortml/cohort/distributed"
	"github.com/cohortml/cohort/distributed/store/memstore"
	"github.com/cohortml/cohort/tensor"
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

// TestBackendsDisagree: a rank whose backend differs from rank 0's is
// refused, naming both backends, before either backend's rendezvous.
func TestBackendsDisagree(t *testing.T) {
	calls := 0
	fake := distributed.Backend{Init: func(context.Context, distributed.Options) (distributed.ProcessGroup, error) {
		calls++
		return nil, nil
	}}
	distributed.Register("agree-a", fake)
	distributed.Register("agree-b", fake)
	st := memstore.New()
	defer st.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := distributed.Init(ctx, distributed.Options{Backend: "agree-a", Store: st, Rank: 0, WorldSize: 2, Prefix: "job"}); err != nil {
		t.Fatalf("rank 0: %v", err)
	}
	_, err := distributed.Init(ctx, distributed.Options{Backend: "agree-b", Store: st, Rank: 1, WorldSize: 2, Prefix: "job"})
	if err == nil || !strings.Contains(err.Error(), `rank 1 uses backend "agree-b" but rank 0 uses "agree-a"`) {
		t.Errorf("rank 1 on another backend: %v, want an error naming both backends", err)
	}
	if _, err := distributed.Init(ctx, distributed.Options{Backend: "agree-a", Store: st, Rank: 1, WorldSize: 2, Prefix: "job"}); err != nil {
		t.Errorf("rank 1 on rank 0's backend: %v", err)
	}
	if calls != 2 {
		t.Errorf("the backends' Init ran %d times, want 2 (rank 0, and rank 1 once it agreed)", calls)
	}
}

// TestBackendForDevice: with no backend named, Init picks the registered
// backend that takes the program's device tensors (none: an error naming
// the device and the import); a backend named explicitly wins, but one
// that takes host memory only is refused for a device program, naming
// both (from the environment, naming COHORT_BACKEND too).
func TestBackendForDevice(t *testing.T) {
	dev := tensor.NewDevice("gpufake", 0)
	_, err := distributed.Init(context.Background(), distributed.Options{Device: dev, WorldSize: 1})
	if err == nil || !strings.Contains(err.Error(), "no registered backend takes gpufake tensors") || !strings.Contains(err.Error(), "gpufake:0") {
		t.Errorf("Init on a device no backend takes = %v, want an error naming the device", err)
	}
	var got []string
	record := func(_ context.Context, opts distributed.Options) (distributed.ProcessGroup, error) {
		got = append(got, opts.Backend)
		return nil, nil
	}
	distributed.Register("devpick", distributed.Backend{Init: record, Devices: []string{"gpufake"}})
	distributed.Register("hostpick", distributed.Backend{Init: record})
	if _, err := distributed.Init(context.Background(), distributed.Options{Device: dev, WorldSize: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := distributed.Init(context.Background(), distributed.Options{Backend: "hostpick", WorldSize: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := distributed.Init(context.Background(), distributed.Options{Backend: "devpick", WorldSize: 1}); err != nil {
		t.Fatal(err) // a device backend serves a CPU program too (host buffers)
	}
	if want := []string{"devpick", "hostpick", "devpick"}; !slices.Equal(got, want) {
		t.Errorf("backends chosen %v, want %v", got, want)
	}
	_, err = distributed.Init(context.Background(), distributed.Options{Backend: "hostpick", Device: dev, WorldSize: 1})
	if err == nil || !strings.Contains(err.Error(), `backend "hostpick" takes host memory only`) || !strings.Contains(err.Error(), "gpufake:0") {
		t.Errorf("Init(hostpick) on a device = %v, want an error naming both", err)
	}
	t.Setenv("COHORT_BACKEND", "hostpick")
	_, err = distributed.InitFromEnvOn(context.Background(), dev)
	if err == nil || !strings.Contains(err.Error(), `COHORT_BACKEND="hostpick"`) || !strings.Contains(err.Error(), "gpufake:0") {
		t.Errorf("InitFromEnvOn with COHORT_BACKEND=hostpick on a device = %v, want an error naming the variable and the device", err)
	}
}
