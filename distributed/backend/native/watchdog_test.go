package native_test

import (
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cohortml/cohort/distributed"
	"github.com/cohortml/cohort/distributed/distributedtest"
	"github.com/cohortml/cohort/distributed/flight"
	"github.com/cohortml/cohort/distributed/internal/logtest"
	"github.com/cohortml/cohort/distributed/store/memstore"
)

// TestWatchdogNamesLateRank: rank 1 sleeps before an all-reduce that the
// others have entered; within the interval + 5 s exactly one rank reports
// that rank 1 never entered it, naming its last op (a broadcast), and the
// job then completes normally once rank 1 arrives.
func TestWatchdogNamesLateRank(t *testing.T) {
	const interval = 2 * time.Second
	for _, world := range []int{2, 4} {
		t.Run(fmt.Sprintf("world=%d", world), func(t *testing.T) {
			st := memstore.New()
			defer st.Close()
			var log logtest.Buffer
			reports := make(chan flight.Diagnosis, world)
			entered := make(chan time.Time, world)
			distributedtest.Run(t, world, func(t *testing.T, pg distributed.ProcessGroup) {
				ctx := distributedtest.Context(t, 30*time.Second)
				err := distributed.Watch(pg, st, "test", distributed.WatchdogOptions{Interval: interval,
					Log:    slog.New(slog.NewTextHandler(&log, nil)),
					Report: func(d flight.Diagnosis) { reports <- d }})
				if err != nil {
					t.Error(err)
					return
				}
				buf := distributed.F32(make([]float32, 64))
				if err := pg.Broadcast(ctx, buf, 0).Wait(); err != nil {
					t.Errorf("rank %d: broadcast: %v", pg.Rank(), err)
					return
				}
				if pg.Rank() == 1 {
					// Stay away until the watchdog has spoken (bounded).
					select {
					case d := <-reports:
						reports <- d
					case <-time.After(interval + 10*time.Second):
					}
				} else {
					entered <- time.Now()
				}
				if err := pg.AllReduce(ctx, buf, distributed.Sum).Wait(); err != nil {
					t.Errorf("rank %d: allreduce: %v", pg.Rank(), err)
				}
			})
			close(reports)
			close(entered)
			var first time.Time
			for e := range entered {
				if first.IsZero() || e.Before(first) {
					first = e
				}
			}
			var got []flight.Diagnosis
			for d := range reports {
				got = append(got, d)
			}
			if len(got) != 1 {
				t.Fatalf("%d reports, want exactly 1; log:\n%s", len(got), log.String())
			}
			d := got[0]
			t.Logf("log: %s", strings.TrimSpace(log.String()))
			if len(d.Absent) != 1 || d.Absent[0].Rank != 1 || d.Absent[0].Last == nil || d.Absent[0].Last.Kind != "broadcast" {
				t.Errorf("absent = %+v, want rank 1 with last op broadcast", d.Absent)
			}
			if d.Op.Kind != "allreduce" || d.Op.Seq != 2 {
				t.Errorf("stuck op %s, want allreduce #2", d.Op.Name())
			}
			want := make([]int, 0, world-1)
			for r := range world {
				if r != 1 {
					want = append(want, r)
				}
			}
			if !slices.Equal(d.Waiting, want) {
				t.Errorf("waiting = %v, want %v", d.Waiting, want)
			}
			if !strings.Contains(log.String(), "rank 1 never entered it (its last: broadcast #1 at github.com/cohortml/cohort/distributed/backend/native_test.TestWatchdogNamesLateRank") {
				t.Errorf("log lacks the diagnosis with rank 1's last op and its caller:\n%s", log.String())
			}
			if lag := time.Unix(0, d.Op.Started).Sub(first); lag < -time.Second || lag > time.Second {
				t.Errorf("op started %v after the first rank entered", lag)
			}
			if took := time.Since(first); took > interval+5*time.Second+time.Second { // + the all-reduce after it
				t.Errorf("named after %v, want within %v", took, interval+5*time.Second)
			}
		})
	}
}

// TestWatchdogQuiet: fast ops, idle groups and subgroups never report.
func TestWatchdogQuiet(t *testing.T) {
	defer distributedtest.CheckLeaks(t)()
	st := memstore.New()
	defer st.Close()
	var log logtest.Buffer
	distributedtest.Run(t, 3, func(t *testing.T, pg distributed.ProcessGroup) {
		ctx := distributedtest.Context(t, 30*time.Second)
		if err := distributed.Watch(pg, st, "quiet", distributed.WatchdogOptions{Interval: 100 * time.Millisecond,
			Log: slog.New(slog.NewTextHandler(&log, nil))}); err != nil {
			t.Error(err)
			return
		}
		sub, err := distributed.NewGroup(ctx, pg, []int{0, 2})
		if err != nil {
			t.Error(err)
			return
		}
		buf := distributed.F32(make([]float32, 1000))
		for range 50 {
			if err := pg.AllReduce(ctx, buf, distributed.Sum).Wait(); err != nil {
				t.Error(err)
				return
			}
			if sub != nil {
				if err := sub.AllReduce(ctx, buf, distributed.Sum).Wait(); err != nil {
					t.Error(err)
					return
				}
			}
		}
		time.Sleep(300 * time.Millisecond) // idle for three intervals: nothing to report
	})
	if s := log.String(); s != "" {
		t.Errorf("healthy job logged:\n%s", s)
	}
	keys := 0
	for _, k := range []string{"quiet/flight/0/0", "quiet/flight/0/1", "quiet/flight/0/2"} {
		if _, err := st.Get(distributedtest.Context(t, time.Second), k); err == nil {
			keys++
		}
	}
	if keys != 3 {
		t.Errorf("%d of 3 heartbeats in the store", keys)
	}
}

// TestWatchdogSubgroup: a hang in a subgroup is named in global ranks.
func TestWatchdogSubgroup(t *testing.T) {
	st := memstore.New()
	defer st.Close()
	var log logtest.Buffer
	reported := make(chan flight.Diagnosis, 4)
	distributedtest.Run(t, 4, func(t *testing.T, pg distributed.ProcessGroup) {
		ctx := distributedtest.Context(t, 30*time.Second)
		if err := distributed.Watch(pg, st, "sub", distributed.WatchdogOptions{Interval: 500 * time.Millisecond,
			Log: slog.New(slog.NewTextHandler(&log, nil)), Report: func(d flight.Diagnosis) { reported <- d }}); err != nil {
			t.Error(err)
			return
		}
		sub, err := distributed.NewGroup(ctx, pg, []int{1, 3})
		if err != nil || sub == nil {
			return
		}
		if pg.Rank() == 3 {
			select {
			case d := <-reported:
				reported <- d
			case <-time.After(10 * time.Second):
			}
		}
		if err := sub.Barrier(ctx).Wait(); err != nil {
			t.Error(err)
		}
	})
	select {
	case d := <-reported:
		if len(d.Absent) != 1 || d.Absent[0].Rank != 3 || !slices.Equal(d.Waiting, []int{1}) {
			t.Errorf("diagnosis %q: want global rank 3 absent and rank 1 waiting", d.Text)
		}
	default:
		t.Errorf("no report; log:\n%s", log.String())
	}
}

func TestWatchdogFromEnv(t *testing.T) {
	for _, c := range []struct {
		v    string
		want time.Duration
		err  bool
	}{{"", 0, false}, {"2s", 2 * time.Second, false}, {"90", 90 * time.Second, false},
		{"off", -1, false}, {"0", -1, false}, {"soon", 0, true}} {
		t.Run("COHORT_WATCHDOG="+c.v, func(t *testing.T) {
			o, err := distributed.WatchdogFromEnv(func(k string) string {
				if k == "COHORT_WATCHDOG" {
					return c.v
				}
				return ""
			})
			if (err != nil) != c.err || o.Interval != c.want {
				t.Errorf("got %v, %v; want %v, error %v", o.Interval, err, c.want, c.err)
			}
		})
	}
}

func TestWatchNeedsStore(t *testing.T) {
	distributedtest.Run(t, 1, func(t *testing.T, pg distributed.ProcessGroup) {
		if err := distributed.Watch(pg, nil, "x", distributed.WatchdogOptions{}); err == nil {
			t.Error("Watch with no store succeeded")
		}
	})
}

// TestWatchdogHeartbeatFollowsOps: with the default interval (a beat
// every 15 s) a rank that runs hundreds of ops and then stops must have
// left them in its heartbeat within about a second, op counts included:
// a ring published only every 15 s described such a rank as having run
// no op at all.
func TestWatchdogHeartbeatFollowsOps(t *testing.T) {
	st := memstore.New()
	defer st.Close()
	const ops = 300
	distributedtest.Run(t, 2, func(t *testing.T, pg distributed.ProcessGroup) {
		ctx := distributedtest.Context(t, 30*time.Second)
		if err := distributed.Watch(pg, st, "beat", distributed.WatchdogOptions{}); err != nil {
			t.Error(err)
			return
		}
		buf := distributed.F32(make([]float32, 16))
		for range ops {
			if err := pg.AllReduce(ctx, buf, distributed.Sum).Wait(); err != nil {
				t.Error(err)
				return
			}
		}
		if pg.Rank() != 1 {
			return
		}
		done := time.Now()
		// Rank 1 stays in the job (no op) until its beat shows the ops.
		deadline := time.NewTimer(5 * time.Second)
		defer deadline.Stop()
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			b, err := st.Get(ctx, "beat/flight/0/1")
			if err == nil {
				if s, err := flight.Decode(b, "rank 1"); err == nil && s.Issued >= ops {
					if s.Finished < ops || len(s.Records) == 0 || s.Records[len(s.Records)-1].Seq != ops {
						t.Errorf("heartbeat %+v: want %d ops finished, the last #%d", s, ops, ops)
					}
					t.Logf("rank 1's heartbeat showed its %d ops %v after the last", s.Issued, time.Since(done).Round(time.Millisecond))
					return
				}
			}
			select {
			case <-deadline.C:
				t.Errorf("rank 1's heartbeat still lacks its %d ops 5 s after them (published only every Interval/4 = 15 s?)", ops)
				return
			case <-tick.C:
			}
		}
	})
}
