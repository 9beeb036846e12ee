package rendezvous_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cohortml/cohort/distributed/distributedtest"
	"github.com/cohortml/cohort/distributed/rendezvous"
	"github.com/cohortml/cohort/distributed/store/memstore"
	"github.com/cohortml/cohort/distributed/store/tcpstore"
)

func quiet() rendezvous.Options {
	return rendezvous.Options{Logger: slog.New(slog.DiscardHandler), ListenAddr: ""}
}

// launcherStore starts a store with token on loopback, as a launcher
// does, and occupies another port (busy); both close when t ends.
func launcherStore(t *testing.T, token string) (*tcpstore.Server, net.Listener) {
	t.Helper()
	srv, err := tcpstore.Listen("127.0.0.1:0", tcpstore.Options{Token: token, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { busy.Close() })
	return srv, busy
}

func TestConnectSingleProcess(t *testing.T) {
	info, err := rendezvous.FromEnv(getenv(nil))
	if err != nil {
		t.Fatal(err)
	}
	s, err := rendezvous.Connect(context.Background(), info, quiet())
	if err != nil {
		t.Fatalf("Connect: %v", err)
	}
	defer s.Close()
	if _, ok := s.(*memstore.Store); !ok {
		t.Fatalf("Connect for a world of 1 returned %T; want an in-process *memstore.Store", s)
	}
}

// TestConnectRanks starts the non-zero ranks before rank 0: they must
// retry until rank 0 serves, then all share one store.
func TestConnectRanks(t *testing.T) {
	const world = 3
	port := distributedtest.FreePort(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, world)
	start := func(rank int) {
		defer wg.Done()
		info, err := rendezvous.FromEnv(getenv(map[string]string{
			"RANK": fmt.Sprint(rank), "WORLD_SIZE": fmt.Sprint(world), "MASTER_ADDR": "127.0.0.1",
			"MASTER_PORT": fmt.Sprint(port), "COHORT_TOKEN": "tok",
		}))
		if err != nil {
			errs <- err
			return
		}
		opts := quiet()
		opts.ListenAddr = fmt.Sprintf("127.0.0.1:%d", port)
		s, err := rendezvous.Connect(ctx, info, opts)
		if err != nil {
			errs <- fmt.Errorf("rank %d: %w", rank, err)
			return
		}
		defer s.Close()
		if _, err := s.Add(ctx, "arrived", 1); err != nil {
			errs <- err
			return
		}
		if err := s.Set(ctx, fmt.Sprintf("rank/%d", rank), []byte("here")); err != nil {
			errs <- err
			return
		}
		keys := make([]string, world)
		for r := range keys {
			keys[r] = fmt.Sprintf("rank/%d", r)
		}
		if err := s.Wait(ctx, keys...); err != nil {
			errs <- fmt.Errorf("rank %d: %w", rank, err)
			return
		}
		// Rank 0 owns the server: it leaves after the others.
		if rank != 0 {
			if err := s.Set(ctx, fmt.Sprintf("left/%d", rank), nil); err != nil {
				errs <- err
			}
			return
		}
		if err := s.Wait(ctx, "left/1", "left/2"); err != nil {
			errs <- err
			return
		}
		if v, err := s.Get(ctx, "arrived"); err != nil || string(v) != fmt.Sprint(world) {
			errs <- fmt.Errorf("counter = %q, %v; want %d", v, err, world)
		}
	}
	wg.Add(world)
	go start(1)
	go start(2)
	// Give ranks 1 and 2 time to fail a dial or two, so the retry path
	// runs; the test passes either way.
	time.Sleep(50 * time.Millisecond)
	go start(0)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestConnectLauncherStore: with COHORT_STORE_ADDR every rank dials the
// launcher's store and rank 0 does not try to serve one (MASTER_PORT is
// deliberately occupied, so serving would fail).
func TestConnectLauncherStore(t *testing.T) {
	srv, busy := launcherStore(t, "tok")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for rank := range 2 {
		info, err := rendezvous.FromEnv(getenv(map[string]string{
			"RANK": fmt.Sprint(rank), "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1",
			"MASTER_PORT": fmt.Sprint(busy.Addr().(*net.TCPAddr).Port), "COHORT_TOKEN": "tok",
			"COHORT_STORE_ADDR": srv.Addr().String(),
		}))
		if err != nil {
			t.Fatal(err)
		}
		s, err := rendezvous.Connect(ctx, info, quiet())
		if err != nil {
			t.Fatalf("rank %d: Connect: %v", rank, err)
		}
		if n, err := s.Add(ctx, "n", 1); err != nil || n != int64(rank+1) {
			t.Fatalf("rank %d: Add = %d, %v; want %d", rank, n, err, rank+1)
		}
		s.Close()
	}
}

func TestConnectErrors(t *testing.T) {
	srv, busy := launcherStore(t, "right")
	busyPort := busy.Addr().(*net.TCPAddr).Port
	tests := []struct {
		name    string
		env     map[string]string
		timeout time.Duration
		fast    bool // must fail well before the timeout
		want    []string
		is      error
	}{
		{"wrong-token-not-retried", map[string]string{"RANK": "1", "WORLD_SIZE": "2", "COHORT_STORE_ADDR": srv.Addr().String(), "COHORT_TOKEN": "wrong"},
			10 * time.Second, true, []string{"refused"}, tcpstore.ErrAuth},
		{"no-rank-0", map[string]string{"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": fmt.Sprint(distributedtest.FreePort(t))},
			300 * time.Millisecond, false, []string{"rank 1 of 2", "no store at 127.0.0.1:", "MASTER_ADDR/MASTER_PORT"}, context.DeadlineExceeded},
		{"port-taken", map[string]string{"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": fmt.Sprint(busyPort)},
			10 * time.Second, true, []string{"rank 0 cannot serve", fmt.Sprintf("MASTER_PORT=%d", busyPort)}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			info, err := rendezvous.FromEnv(getenv(tc.env))
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), tc.timeout)
			defer cancel()
			opts := quiet()
			if tc.name == "port-taken" {
				opts.ListenAddr = busy.Addr().String()
			}
			start := time.Now()
			s, err := rendezvous.Connect(ctx, info, opts)
			if err == nil {
				s.Close()
				t.Fatal("Connect succeeded; want an error")
			}
			if tc.fast && time.Since(start) > tc.timeout/2 {
				t.Errorf("Connect took %v to fail; want a prompt error", time.Since(start))
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Errorf("error %q does not wrap %v", err, tc.is)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}
