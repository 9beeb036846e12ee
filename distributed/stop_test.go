package distributed_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cohortml/cohort/distributed"
	"github.com/cohortml/cohort/distributed/distributedtest"
	"github.com/cohortml/cohort/distributed/rendezvous"
)

// TestStopperAgree: ranks that receive signals after different steps
// (or none) all stop after the same step, the first one after any rank
// received one, on the highest-numbered signal; only the ranks that
// received one say when.
func TestStopperAgree(t *testing.T) {
	defer distributedtest.CheckLeaks(t)()
	type delivery struct {
		rank, after int // the signal comes after this many steps (≥ 1: the loop began)
		sig         syscall.Signal
	}
	for _, tc := range []struct {
		name   string
		world  int
		send   []delivery
		stopAt int // the step after which every rank stops
		want   syscall.Signal
	}{
		{"world=1", 1, []delivery{{0, 3, syscall.SIGTERM}}, 4, syscall.SIGTERM},
		{"world=2/last", 2, []delivery{{1, 2, syscall.SIGINT}}, 3, syscall.SIGINT},
		{"world=3/second-step", 3, []delivery{{2, 1, syscall.SIGTERM}}, 2, syscall.SIGTERM},
		{"world=4/two-signals", 4, []delivery{{0, 5, syscall.SIGINT}, {3, 5, syscall.SIGTERM}}, 6, syscall.SIGTERM},
		{"world=3/staggered", 3, []delivery{{1, 4, syscall.SIGINT}, {0, 6, syscall.SIGTERM}}, 5, syscall.SIGINT},
	} {
		t.Run(tc.name, func(t *testing.T) {
			distributedtest.Run(t, tc.world, func(t *testing.T, pg distributed.ProcessGroup) {
				ctx := distributedtest.Context(t, 30*time.Second)
				s := distributed.NewTestStopper(ctx, func(code int) { t.Errorf("exit(%d) after one signal", code) })
				defer s.Close()
				received := false
				for step := 0; step < 20; step++ {
					for _, d := range tc.send {
						if d.rank == pg.Rank() && d.after == step && d.after < tc.stopAt {
							s.HandleSignal(d.sig)
							received = true
						}
					}
					stop, err := s.ShouldStop(s.Context(), pg)
					if err != nil {
						t.Fatal(err)
					}
					if !stop {
						if s.Err() != nil {
							t.Errorf("Err = %v before a stop", s.Err())
						}
						continue
					}
					if step+1 != tc.stopAt {
						t.Errorf("rank %d stopped after step %d; want %d", pg.Rank(), step+1, tc.stopAt)
					}
					var st *distributed.Stopped
					if !errors.As(s.Err(), &st) || st.Signal != tc.want || st.ExitCode() != 128+int(tc.want) {
						t.Fatalf("rank %d: Err = %v; want a *Stopped for %v", pg.Rank(), s.Err(), tc.want)
					}
					if received == st.At.IsZero() {
						t.Errorf("rank %d: At = %v, yet it received a signal: %v", pg.Rank(), st.At, received)
					}
					if again, err := s.ShouldStop(s.Context(), pg); !again || err != nil {
						t.Errorf("ShouldStop after the stop = %v, %v; want true", again, err)
					}
					if s.Context().Err() != nil {
						t.Errorf("Context ended by a first signal during the loop: %v", context.Cause(s.Context()))
					}
					return
				}
				t.Errorf("rank %d never stopped", pg.Rank())
			})
		})
	}
}

// newStopper returns a test Stopper whose error file is path, and the
// code it exited with (-1 while it has not); it is closed when t ends.
func newStopper(t *testing.T) (s *distributed.Stopper, path string, code *int) {
	path = filepath.Join(t.TempDir(), "error.json")
	t.Setenv("TORCHELASTIC_ERROR_FILE", path)
	code = new(int)
	*code = -1
	s = distributed.NewTestStopper(context.Background(), func(c int) { *code = c })
	t.Cleanup(func() { s.Close() })
	return s, path, code
}

// TestStopperBeforeLoop: a signal before the first ShouldStop ends the
// process at once with 128+N (there is no step to finish), recording the
// signal.
func TestStopperBeforeLoop(t *testing.T) {
	s, path, code := newStopper(t)
	s.HandleSignal(syscall.SIGTERM)
	if *code != 143 {
		t.Fatalf("exit %d after a signal before the loop; want 143", *code)
	}
	var sig *rendezvous.Signaled
	if !errors.As(context.Cause(s.Context()), &sig) || sig.Signal != syscall.SIGTERM {
		t.Errorf("cause %v; want SIGTERM", context.Cause(s.Context()))
	}
	if rec, err := rendezvous.ReadErrorFile(path); err != nil || rec.Signal != "SIGTERM" || !strings.Contains(rec.Message, "before the first step") {
		t.Errorf("error file %+v, %v", rec, err)
	}
}

// TestStopperSecondSignal: a second signal exits at once with 128+N and
// records it in the error file.
func TestStopperSecondSignal(t *testing.T) {
	s, path, code := newStopper(t)
	if stop, err := s.ShouldStop(s.Context(), nil); stop || err != nil {
		t.Fatalf("ShouldStop = %v, %v before any signal", stop, err)
	}
	s.HandleSignal(syscall.SIGINT)
	if *code != -1 || s.Context().Err() != nil {
		t.Fatalf("first signal in the loop: exit %d, context %v; want neither", *code, s.Context().Err())
	}
	if rec, err := rendezvous.ReadErrorFile(path); err != nil || rec.Signal != "SIGINT" {
		t.Errorf("after the first signal the error file holds %+v, %v; want SIGINT noted", rec, err)
	}
	s.HandleSignal(syscall.SIGINT)
	if *code != 130 {
		t.Errorf("second SIGINT: exit %d; want 130", *code)
	}
	if s.Context().Err() == nil {
		t.Error("Context live after a second signal")
	}
}

// TestStopperNil: a nil Stopper never stops.
func TestStopperNil(t *testing.T) {
	var s *distributed.Stopper
	if stop, err := s.ShouldStop(context.Background(), nil); stop || err != nil || s.Err() != nil {
		t.Errorf("nil Stopper: %v, %v, %v", stop, err, s.Err())
	}
	s.Close()
}

// TestNotifyStop: the process's own SIGTERM reaches the Stopper.
func TestNotifyStop(t *testing.T) {
	s := distributed.NotifyStop(context.Background())
	defer s.Close()
	if stop, err := s.ShouldStop(context.Background(), nil); stop || err != nil { // the loop began
		t.Fatalf("ShouldStop = %v, %v before a signal", stop, err)
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		stop, err := s.ShouldStop(context.Background(), nil)
		if err != nil {
			t.Fatal(err)
		}
		if stop {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("SIGTERM did not reach the Stopper within 10 s")
		}
		time.Sleep(time.Millisecond) // a training step
	}
	if got := fmt.Sprint(s.Err()); got != "distributed: stopped by SIGTERM" {
		t.Errorf("Err = %q", got)
	}
}

// TestStopperAfterStep: checkpoints when due, and once more when a signal
// stops the job between intervals, saying where; without a directory it
// saves nothing and says so.
func TestStopperAfterStep(t *testing.T) {
	for _, tc := range []struct {
		name, dir string
		due       bool
		saves     int
		want      string
	}{
		{"due", "ck", true, 2, "stopped by SIGTERM after step 2; checkpoint saved in ck"},
		{"between intervals", "ck", false, 1, "stopped by SIGTERM after step 2; checkpoint saved in ck"},
		{"no directory", "", true, 0, "stopped by SIGTERM after step 2; no checkpoint without -checkpoint-dir"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := distributed.NewTestStopper(context.Background(), func(int) {})
			defer s.Close()
			saves := 0
			save := func() error { saves++; return nil }
			if err := s.AfterStep(context.Background(), nil, 1, tc.dir, tc.due, save); err != nil {
				t.Fatalf("step 1: %v", err)
			}
			s.HandleSignal(syscall.SIGTERM)
			err := s.AfterStep(context.Background(), nil, 2, tc.dir, tc.due, save)
			var st *distributed.Stopped
			if !errors.As(err, &st) || !strings.Contains(err.Error(), tc.want) || saves != tc.saves {
				t.Errorf("AfterStep: %v after %d saves; want %q after %d", err, saves, tc.want, tc.saves)
			}
		})
	}
	var s *distributed.Stopper
	if err := s.AfterStep(context.Background(), nil, 1, "", false, nil); err != nil {
		t.Errorf("nil Stopper: %v", err)
	}
}
