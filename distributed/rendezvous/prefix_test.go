package rendezvous_test

import (
	"context"
	"testing"

	"github.com/cohortml/cohort/distributed/rendezvous"
	"github.com/cohortml/cohort/distributed/store"
	"github.com/cohortml/cohort/distributed/store/memstore"
	"github.com/cohortml/cohort/distributed/store/storetest"
)

// TestPrefixConformance runs the store suite on a WithPrefix view: it is
// a Store like the others.
func TestPrefixConformance(t *testing.T) {
	storetest.Run(t, storetest.InProcess(func() store.Store {
		return rendezvous.WithPrefix(memstore.New(), "round/3/")
	}))
}

// TestPrefixIsolates: a view's keys live under its prefix in the store
// beneath, and a key of the store outside the prefix is not seen.
func TestPrefixIsolates(t *testing.T) {
	ctx := context.Background()
	base := memstore.New()
	defer base.Close()
	view := rendezvous.WithPrefix(base, "round/3/")
	if err := view.Set(ctx, "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	if got, err := base.Get(ctx, "round/3/k"); err != nil || string(got) != "v" {
		t.Errorf("base Get(round/3/k) = %q, %v; want v", got, err)
	}
	if err := base.Set(ctx, "other", []byte("x")); err != nil {
		t.Fatal(err)
	}
	if ok, err := view.Delete(ctx, "other"); ok || err != nil {
		t.Errorf("view Delete(other) = %v, %v; want a key the view does not see", ok, err)
	}
	if rendezvous.WithPrefix(base, "") != store.Store(base) {
		t.Error("WithPrefix with an empty prefix is not the store itself")
	}
}
