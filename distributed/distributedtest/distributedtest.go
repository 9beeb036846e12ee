package distributedtest

import (
	"bytes"
	"context"

	"net"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cohortml/cohort/distributed"
	"github.com/cohortml/cohort/distributed/backend/native"
	"github.com/cohortml/cohort/distributed/transport/inproc"
)

// Timeout is the default per-op timeout of the groups Run builds: long
// enough for the race detector on a loaded machine, short enough that a
// hang fails the test instead of the test binary's deadline.
const Timeout = 2 * time.Minute

// Run runs fn once per rank of a group of world ranks, each on its own
// goroutine, and returns when all have returned. The groups use
// distributedtest.Timeout and default tuning; RunWith takes options.
//
// fn may call t.Log, t.Error and friends. t.Fatal and t.FailNow end only
// the calling rank's goroutine, and a panic is caught and reported; either
// way that rank's group is closed at once, so the other ranks fail fast
// (with distributed.ErrAborted) instead of waiting for it. Run closes every group
// when all ranks are done.
func Run(t *testing.T, world int, fn func(t *testing.T, pg distributed.ProcessGroup)) {
	t.Helper()
	RunWith(t, world, distributed.GroupOptions{}, fn)
}

// RunWith is Run with group options (a zero Timeout means distributedtest.Timeout).
func RunWith(t *testing.T, world int, opts distributed.GroupOptions, fn func(t *testing.T, pg distributed.ProcessGroup)) {
	t.Helper()
	if world < 1 {
		t.Fatalf("distributedtest: world size %d < 1", world)
	}
	if opts.Timeout == 0 {
		opts.Timeout = Timeout
	}
	mesh := inproc.NewMesh(world)
	groups := make([]distributed.ProcessGroup, world)
	for r := range world {
		pg, err := native.New(mesh[r], opts)
		if err != nil {
			for _, g := range groups[:r] {
				g.Close()
			}
			t.Fatalf("distributedtest: rank %d: %v", r, err)
		}
		groups[r] = pg
	}
	var wg sync.WaitGroup
	for r, pg := range groups {
		wg.Go(func() {
			finished := false
			defer func() {
				if p := recover(); p != nil {
					t.Errorf("distributedtest: rank %d panicked: %v\n%s", r, p, debug.Stack())
				} else if !finished {
					t.Errorf("distributedtest: rank %d stopped (t.Fatal or runtime.Goexit)", r)
				}
				if !finished {
					pg.Close() // its peers fail fast instead of hanging
				}
			}()
			fn(t, pg)
			finished = true
		})
	}
	wg.Wait()
	for r, pg := range groups {
		if err := pg.Close(); err != nil {
			t.Errorf("distributedtest: rank %d: Close: %v", r, err)
		}
	}
}

// CheckLeaks records the goroutines running now and returns a function
// that fails t if, within a few seconds, more are running that come from
// package distributed or below. Call it as `defer distributedtest.CheckLeaks(t)()`
// in tests that do not run in parallel with others.
func CheckLeaks(t testing.TB) func() {
	t.Helper()
	before := distGoroutines()
	return func() {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		var extra []string
		for {
			extra = extra[:0]
			for id, stack := range distGoroutines() {
				if _, ok := before[id]; !ok {
					extra = append(extra, stack)
				}
			}
			if len(extra) == 0 || time.Now().After(deadline) {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		if len(extra) > 0 {
			t.Errorf("distributedtest: %d goroutines leaked:\n%s", len(extra), strings.Join(extra, "\n\n"))
		}
	}
}

// distGoroutines returns the stacks of live goroutines that run code of
// package distributed or below, by goroutine header line.
func distGoroutines() map[string]string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	out := map[string]string{}
	for _, g := range bytes.Split(buf, []byte("\n\n")) {
		s := string(g)
		header, _, _ := strings.Cut(s, "\n")
		if strings.Contains(s, "github.com/cohortml/cohort/distributed") && !strings.Contains(s, "distributedtest.distGoroutines") {
			id := strings.Fields(header)
			if len(id) > 1 {
				out[id[1]] = s
			}
		}
	}
	return out
}

// Context returns a context for one test step: cancelled when the test
// ends or after d, whichever is first.
func Context(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// Ranks returns 0, 1, …, n−1: the ranks of a world of n.
func Ranks(n int) []int {
	r := make([]int, n)
	for i := range r {
		r[i] = i
	}
	return r
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}
