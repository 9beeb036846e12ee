package native_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cohortml/cohort/distributed"
	"github.com/cohortml/cohort/distributed/distributedtest"
	"github.com/cohortml/cohort/distributed/store"
	"github.com/cohortml/cohort/distributed/store/memstore"
)

// initWorld runs Init for every rank of a world on goroutines sharing one
// memstore, then fn per rank, then closes the groups.
func initWorld(t *testing.T, world int, opts distributed.Options, fn func(t *testing.T, pg distributed.ProcessGroup)) {
	t.Helper()
	st := memstore.New()
	defer st.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pgs := make([]distributed.ProcessGroup, world)
	errs := make([]error, world)
	var wg sync.WaitGroup
	for r := range world {
		wg.Go(func() {
			o := opts
			o.Store, o.Rank, o.WorldSize = st, r, world
			pgs[r], errs[r] = distributed.Init(ctx, o)
		})
	}
	wg.Wait()
	defer func() {
		for _, pg := range pgs {
			if pg != nil {
				pg.Close()
			}
		}
	}()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	for _, pg := range pgs {
		wg.Go(func() { fn(t, pg) })
	}
	wg.Wait()
}

// initErrs runs Init with opts for ranks 0..ranks-1 of opts.WorldSize on
// goroutines sharing one memstore, within timeout, closes the groups
// that come up and returns each rank's error.
func initErrs(timeout time.Duration, ranks int, opts distributed.Options) []error {
	st := memstore.New()
	defer st.Close()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	errs := make([]error, ranks)
	var wg sync.WaitGroup
	for r := range ranks {
		wg.Go(func() {
			o := opts
			o.Store, o.Rank = st, r
			pg, err := distributed.Init(ctx, o)
			if pg != nil {
				pg.Close()
			}
			errs[r] = err
		})
	}
	wg.Wait()
	return errs
}

func TestInit(t *testing.T) {
	defer distributedtest.CheckLeaks(t)()
	for _, tc := range []struct {
		transport string
		world     int
	}{{"tcp", 1}, {"tcp", 2}, {"tcp", 3}, {"shm", 2}, {"shm", 3}, {"auto", 3}} {
		world := tc.world
		t.Run(fmt.Sprintf("%s/world=%d", tc.transport, world), func(t *testing.T) {
			initWorld(t, world, distributed.Options{Transport: tc.transport, Token: []byte("secret")}, func(t *testing.T, pg distributed.ProcessGroup) {
				buf := []float32{float32(pg.Rank()), 1}
				if wait(t, "allreduce", pg.AllReduce(context.Background(), distributed.F32(buf), distributed.Sum)) {
					if want := float32(world * (world - 1) / 2); buf[0] != want || buf[1] != float32(world) {
						t.Errorf("rank %d: %v, want [%v %d]", pg.Rank(), buf, want, world)
					}
				}
			})
		})
	}
}

func TestInitOptionErrors(t *testing.T) {
	st := memstore.New()
	defer st.Close()
	cases := []struct {
		name string
		opts distributed.Options
		want string
	}{
		{"world", distributed.Options{Store: st, WorldSize: 0}, "WorldSize 0"},
		{"rank", distributed.Options{Store: st, Rank: 3, WorldSize: 2}, "Rank 3 out of range"},
		{"store", distributed.Options{Rank: 0, WorldSize: 2}, "no Store"},
		{"transport", distributed.Options{Store: st, WorldSize: 2, Transport: "udp"}, `unknown transport "udp"`},
		{"inproc", distributed.Options{Store: st, WorldSize: 2, Transport: "inproc"}, "inproc.NewMesh(2)"},
		{"timeout", distributed.Options{Store: st, WorldSize: 1, Group: distributed.GroupOptions{Timeout: -1}}, "Timeout -1ns is negative"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := distributed.Init(context.Background(), tc.opts)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

// TestInitMissingRank: Init of a world of 3 where rank 2 never comes fails
// when ctx ends, naming rank 2.
func TestInitMissingRank(t *testing.T) {
	errs := initErrs(300*time.Millisecond, 2, distributed.Options{WorldSize: 3, Transport: "tcp"})
	for r, err := range errs {
		if err == nil || !strings.Contains(err.Error(), "rank 2") {
			t.Errorf("rank %d: %v, want an error naming rank 2", r, err)
		}
		t.Logf("rank %d: %v", r, err)
	}
}

// TestInitTCPCongestion: Options.TCPCongestion reaches the TCP
// transport; a congestion control the kernel lacks fails Init, naming
// it. (tcp's TestCongestion checks what the connections use.)
func TestInitTCPCongestion(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("TCP_CONGESTION is Linux's")
	}
	initWorld(t, 2, distributed.Options{Transport: "tcp", TCPCongestion: "system"}, func(t *testing.T, pg distributed.ProcessGroup) {
		if err := pg.Barrier(context.Background()).Wait(); err != nil {
			t.Error(err)
		}
	})
	errs := initErrs(10*time.Second, 2, distributed.Options{WorldSize: 2, Transport: "tcp", TCPCongestion: "nosuch"})
	for r, err := range errs {
		if err == nil || !strings.Contains(err.Error(), `"nosuch"`) {
			t.Errorf("rank %d: TCPCongestion nosuch: %v, want an error naming it", r, err)
		}
	}
}

// TestInitCloseStore: a group handed its store (Options.CloseStore, as
// InitFromEnv does) closes it with itself; otherwise the store stays the
// caller's. The ranks' groups share one JobID.
func TestInitCloseStore(t *testing.T) {
	ctx := context.Background()
	for _, hand := range []bool{false, true} {
		st := memstore.New()
		var pg1 distributed.ProcessGroup
		done := make(chan error, 1)
		go func() {
			var err error
			pg1, err = distributed.Init(ctx, distributed.Options{Store: st, WorldSize: 2, Rank: 1, Group: distributed.GroupOptions{Timeout: 30 * time.Second}})
			done <- err
		}()
		pg, err := distributed.Init(ctx, distributed.Options{Store: st, WorldSize: 2, Rank: 0, CloseStore: hand,
			Group: distributed.GroupOptions{Timeout: 30 * time.Second}})
		if err := errors.Join(err, <-done); err != nil {
			t.Fatal(err)
		}
		if j := distributed.JobID(pg); j == "" || j != distributed.JobID(pg1) {
			t.Errorf("JobID: rank 0 %q, rank 1 %q; want one non-empty identity", j, distributed.JobID(pg1))
		}
		if err := errors.Join(pg.Close(), pg1.Close()); err != nil {
			t.Fatal(err)
		}
		err = st.Set(ctx, "after", []byte{1})
		if hand && !errors.Is(err, store.ErrClosed) {
			t.Errorf("CloseStore: Set after the group closed = %v, want store.ErrClosed", err)
		}
		if !hand && err != nil {
			t.Errorf("store not handed over: Set after the group closed = %v, want it open", err)
		}
		st.Close()
	}
}
