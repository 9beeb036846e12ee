package shm

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"cohort/dist/transport"
	"cohort/dist/transport/transporttest"
)

const testPrefix = "cohort-test"

func connectWorld(tb testing.TB, n int, opts func(rank int) Options) ([]*Transport, []error) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ls := make([]*Listener, n)
	addrs := make([]string, n)
	for r := range n {
		l, err := Listen(ctx, r, n, opts(r))
		if err != nil {
			tb.Fatal(err)
		}
		ls[r] = l
		addrs[r] = l.Addr()
	}
	ts := make([]*Transport, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Go(func() { ts[r], errs[r] = ls[r].Connect(ctx, addrs) })
	}
	wg.Wait()
	return ts, errs
}

func newWorld(tb testing.TB, n int) transporttest.World {
	ts, errs := connectWorld(tb, n, func(int) Options {
		return Options{Token: []byte("test-token"), Prefix: testPrefix, RingBytes: 1 << 20}
	})
	for r, err := range errs {
		if err != nil {
			tb.Fatalf("rank %d: %v", r, err)
		}
	}
	w := transporttest.World{Kill: func(r int) { ts[r].kill() }}
	for _, t := range ts {
		w.Transports = append(w.Transports, t)
	}
	return w
}

// leftovers lists this package's test files in /dev/shm.
func leftovers(t *testing.T) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join("/dev/shm", testPrefix+"-*"))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestConformance(t *testing.T) {
	transporttest.Run(t, newWorld, transporttest.Config{})
	if files := leftovers(t); len(files) > 0 {
		t.Errorf("files left in /dev/shm: %v", files)
	}
}

var _ = fmt.Sprint
var _ = os.Getpid
var _ = strings.Contains
var _ transport.Transport = (*Transport)(nil)
