package native

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cohortml/cohort/distributed"
	"github.com/cohortml/cohort/distributed/store/memstore"
	"github.com/cohortml/cohort/distributed/transport"
	"github.com/cohortml/cohort/distributed/transport/route"
)

// initHosts runs Init for a world whose rank r claims to be on host
// hosts[r], as ranks of a job spread over several machines would.
func initHosts(t *testing.T, hosts []string, kind string) ([]distributed.ProcessGroup, []error) {
	t.Helper()
	st := memstore.New()
	t.Cleanup(func() { st.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	world := len(hosts)
	pgs := make([]distributed.ProcessGroup, world)
	errs := make([]error, world)
	var wg sync.WaitGroup
	for r := range world {
		wg.Go(func() {
			pgs[r], errs[r] = initConfig(ctx, config{Options: distributed.Options{Store: st, Rank: r, WorldSize: world, Transport: kind,
				Host: "127.0.0.1", Token: []byte("secret")}, hostID: hosts[r]})
		})
	}
	wg.Wait()
	t.Cleanup(func() {
		for _, pg := range pgs {
			if pg != nil {
				pg.Close()
			}
		}
	})
	return pgs, errs
}

// kindOf names the part of t that reaches rank peer.
func kindOf(t transport.Transport, peer int) string {
	if rt, ok := t.(*route.Transport); ok {
		t = rt.Via(peer)
	}
	return strings.TrimSuffix(strings.TrimPrefix(fmt.Sprintf("%T", t), "*"), ".Transport")
}

func TestConnectAcrossHosts(t *testing.T) {
	for _, tc := range []struct {
		name, kind string
		hosts      []string
		// want[r] lists, per peer, "shm" or "tcp".
		want []string
	}{
		{"auto/two-hosts", "auto", []string{"a", "a", "b", "b"},
			[]string{"shm shm tcp tcp", "shm shm tcp tcp", "tcp tcp shm shm", "tcp tcp shm shm"}},
		{"auto/interleaved-and-alone", "auto", []string{"a", "b", "a", "b", "c"},
			[]string{"shm tcp shm tcp tcp", "tcp shm tcp shm tcp", "shm tcp shm tcp tcp", "tcp shm tcp shm tcp", "tcp tcp tcp tcp tcp"}},
		{"tcp/two-hosts", "tcp", []string{"a", "a", "b", "b"},
			[]string{"tcp tcp tcp tcp", "tcp tcp tcp tcp", "tcp tcp tcp tcp", "tcp tcp tcp tcp"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pgs, errs := initHosts(t, tc.hosts, tc.kind)
			if err := errors.Join(errs...); err != nil {
				t.Fatal(err)
			}
			world := len(tc.hosts)
			for r, pg := range pgs {
				var got []string
				for q := range world {
					got = append(got, kindOf(pg.(*group).t, q))
				}
				if strings.Join(got, " ") != tc.want[r] {
					t.Errorf("rank %d reaches ranks 0..%d through %v, want %s", r, world-1, got, tc.want[r])
				}
			}
			// Collectives work over the mixture.
			var wg sync.WaitGroup
			for r, pg := range pgs {
				wg.Go(func() {
					ctx := context.Background()
					n := 1<<16 + 3
					buf := make([]float32, n)
					for i := range buf {
						buf[i] = float32(r + i%7)
					}
					if err := pg.AllReduce(ctx, distributed.F32(buf), distributed.Sum).Wait(); err != nil {
						t.Errorf("rank %d: all-reduce: %v", r, err)
						return
					}
					for i, v := range buf {
						if want := float32(world*(world-1)/2 + world*(i%7)); v != want {
							t.Errorf("rank %d: element %d = %v, want %v", r, i, v, want)
							return
						}
					}
					b := []int64{int64(r)}
					if err := pg.Broadcast(ctx, distributed.I64(b), world-1).Wait(); err != nil || b[0] != int64(world-1) {
						t.Errorf("rank %d: broadcast: %v, %v", r, b, err)
					}
				})
			}
			wg.Wait()
		})
	}
}

func TestConnectShmNeedsOneHost(t *testing.T) {
	_, errs := initHosts(t, []string{"a|x", "b|y"}, "shm")
	for r, err := range errs {
		other := 1 - r
		want := fmt.Sprintf(`transport shm needs every rank on one host, but rank %d is on %q and rank %d on %q`,
			r, string(rune('a'+r)), other, string(rune('a'+other)))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("rank %d: %v, want an error containing %q", r, err, want)
		}
	}
}
