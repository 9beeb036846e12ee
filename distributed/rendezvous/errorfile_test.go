package rendezvous_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/cohortml/cohort/distributed/rendezvous"
)

func TestErrorFileRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "error.json")
	want := rendezvous.ErrorRecord{
		Message: "distributed: rank 1: all_reduce seq 7: cancelled locally", Time: time.Unix(1_700_000_000, 123456789),
		Signal: "SIGTERM", SignalTime: time.Unix(1_700_000_000, 5), Extra: map[string]string{"rank": "1"},
	}
	if err := rendezvous.WriteErrorFile(path, want); err != nil {
		t.Fatal(err)
	}
	got, err := rendezvous.ReadErrorFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got.Message != want.Message || !got.Time.Equal(want.Time) || got.Signal != want.Signal ||
		!got.SignalTime.Equal(want.SignalTime) || got.Extra["rank"] != "1" || len(got.Extra) != 1 {
		t.Fatalf("read %+v; want %+v", got, want)
	}
}

// TestReadErrorFileTorchrun reads the files torchrun's error handler
// writes (seconds only, a Python call stack) and its older plain form.
func TestReadErrorFileTorchrun(t *testing.T) {
	for _, tc := range []struct {
		name, json, msg string
		time            time.Time
		extra           string
	}{
		{"record", `{"message": {"message": "RuntimeError: boom", "extraInfo": {"py_callstack": "Traceback…", "timestamp": "1700000001"}}}`,
			"RuntimeError: boom", time.Unix(1_700_000_001, 0), "Traceback…"},
		{"numeric-timestamp", `{"message": {"message": "x", "extraInfo": {"timestamp": 1700000002}}}`, "x", time.Unix(1_700_000_002, 0), ""},
		{"plain-message", `{"message": "out of memory"}`, "out of memory", time.Time{}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "error.json")
			os.WriteFile(path, []byte(tc.json), 0o644)
			got, err := rendezvous.ReadErrorFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if got.Message != tc.msg || !got.Time.Equal(tc.time) || got.Extra["py_callstack"] != tc.extra {
				t.Fatalf("read %+v; want message %q, time %v, py_callstack %q", got, tc.msg, tc.time, tc.extra)
			}
		})
	}
	for _, tc := range []struct{ name, json string }{
		{"not-json", "boom"},
		{"bad-message", `{"message": 7}`},
	} {
		t.Run("bad/"+tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "error.json")
			os.WriteFile(path, []byte(tc.json), 0o644)
			if _, err := rendezvous.ReadErrorFile(path); err == nil {
				t.Fatalf("ReadErrorFile(%q) succeeded; want an error", tc.json)
			}
		})
	}
}

// TestFailAfterSignal: a worker stopped by SIGTERM through SignalContext
// records the signal and exits 143; without a signal, 1.
func TestFailAfterSignal(t *testing.T) {
	path := filepath.Join(t.TempDir(), "error.json")
	t.Setenv("TORCHELASTIC_ERROR_FILE", path)
	if code := rendezvous.Fail(context.Background(), errors.New("plain")); code != 1 {
		t.Errorf("Fail without a signal = %d; want 1", code)
	}
	if rec, err := rendezvous.ReadErrorFile(path); err != nil || rec.Message != "plain" || rec.Signal != "" {
		t.Errorf("record %+v, %v; want message \"plain\" and no signal", rec, err)
	}

	ctx, stop := rendezvous.SignalContext(context.Background())
	defer stop()
	before := time.Now()
	if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("SignalContext not cancelled by SIGTERM")
	}
	var sig *rendezvous.Signaled
	if !errors.As(context.Cause(ctx), &sig) || sig.Signal != syscall.SIGTERM || sig.At.Before(before) {
		t.Fatalf("cause %v; want a *Signaled for SIGTERM", context.Cause(ctx))
	}
	if code := rendezvous.Fail(ctx, errors.New("all_reduce: cancelled locally")); code != 128+15 {
		t.Errorf("Fail after SIGTERM = %d; want 143", code)
	}
	rec, err := rendezvous.ReadErrorFile(path)
	if err != nil || rec.Signal != "SIGTERM" || rec.SignalTime.Before(before) || rec.Time.Before(rec.SignalTime) {
		t.Errorf("record %+v, %v; want SIGTERM with its time", rec, err)
	}
}

// TestRecordSignalNotifyContext: a worker using signal.NotifyContext (no
// Fail) still leaves the signal and its time for the launcher; a later
// Fail keeps that time and exits 130.
func TestRecordSignalNotifyContext(t *testing.T) {
	path := filepath.Join(t.TempDir(), "error.json")
	t.Setenv("TORCHELASTIC_ERROR_FILE", path)
	rendezvous.RecordSignal(context.Background(), path) // not cancelled: nothing
	plain, cancel := context.WithCancel(context.Background())
	cancel()
	rendezvous.RecordSignal(plain, path) // cancelled, no signal: nothing
	if _, err := os.Stat(path); err == nil {
		t.Fatal("RecordSignal wrote a record without a signal")
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT)
	defer stop()
	before := time.Now()
	syscall.Kill(os.Getpid(), syscall.SIGINT)
	select {
	case <-ctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("NotifyContext not cancelled by SIGINT")
	}
	rendezvous.RecordSignal(ctx, path)
	rec, err := rendezvous.ReadErrorFile(path)
	if err != nil || rec.Signal != "SIGINT" || rec.SignalTime.Before(before) {
		t.Fatalf("record %+v, %v; want SIGINT with its time", rec, err)
	}
	if code := rendezvous.Fail(ctx, errors.New("boom")); code != 130 {
		t.Errorf("Fail = %d; want 130", code)
	}
	got, err := rendezvous.ReadErrorFile(path)
	if err != nil || got.Message != "boom" || got.Signal != "SIGINT" || !got.SignalTime.Equal(rec.SignalTime) {
		t.Errorf("after Fail: %+v, %v; want message boom, the signal time kept", got, err)
	}
}

// TestFailGracefulStop: a worker that stopped gracefully returns an error
// wrapping a *Signaled (its context still live); Fail records the signal,
// keeps the time NoteSignal recorded when the signal came, and exits
// 128+N.
func TestFailGracefulStop(t *testing.T) {
	path := filepath.Join(t.TempDir(), "error.json")
	t.Setenv("TORCHELASTIC_ERROR_FILE", path)
	at := time.Now().Add(-time.Second)
	rendezvous.NoteSignal(syscall.SIGTERM, at)
	rec, err := rendezvous.ReadErrorFile(path)
	if err != nil || rec.Signal != "SIGTERM" || !rec.SignalTime.Equal(at) {
		t.Fatalf("after NoteSignal: record %+v, %v; want SIGTERM at %v", rec, err, at)
	}
	stopped := fmt.Errorf("after step 7: %w", &rendezvous.Signaled{Signal: syscall.SIGTERM})
	if code := rendezvous.Fail(context.Background(), stopped); code != 143 {
		t.Errorf("Fail = %d; want 143", code)
	}
	rec, err = rendezvous.ReadErrorFile(path)
	if err != nil || rec.Signal != "SIGTERM" || !rec.SignalTime.Equal(at) || rec.Message != stopped.Error() {
		t.Errorf("record %+v, %v; want SIGTERM at %v with the error's message", rec, err, at)
	}
	if code := rendezvous.Fail(context.Background(), &rendezvous.Signaled{Signal: syscall.SIGINT}); code != 130 {
		t.Errorf("Fail(SIGINT) = %d; want 130", code)
	}
}
