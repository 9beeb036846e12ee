package rendezvous

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// ErrorRecord is what a failed worker leaves for its launcher in the file
// TORCHELASTIC_ERROR_FILE names (Info.ErrorFile). cohort run sets that
// variable for every worker, reads the file when the worker fails and
// puts it in its failure report; torchrun does the same. The launcher
// blames the worker whose failure came first (Time, or SignalTime when a
// signal stopped it), so a worker stopped by a signal is named rather
// than the peers that failed because it left.
type ErrorRecord struct {
	// Message says what went wrong (the error's text).
	Message string
	// Time is when the failure was recorded.
	Time time.Time
	// Signal names the signal that stopped the worker ("SIGTERM"); ""
	// when none did.
	Signal string
	// SignalTime is when that signal arrived; zero without Signal.
	SignalTime time.Time
	// Extra holds further string facts, written into extraInfo.
	Extra map[string]string
}

// The file holds torchrun's layout, which both launchers read:
//
//	{"message": {"message": "…", "extraInfo": {"timestamp": "1700000000", …}}}
//
// extraInfo's "timestamp" is in Unix seconds, as torchrun writes it;
// cohort adds "timestamp_ns", "signal" and "signal_timestamp_ns".
type errorFile struct {
	Message errorMessage `json:"message"`
}

type errorMessage struct {
	Message   string            `json:"message"`
	ExtraInfo map[string]string `json:"extraInfo,omitempty"`
}

// maxErrorFileBytes bounds what ReadErrorFile reads.
const maxErrorFileBytes = 1 << 20

// WriteErrorFile writes rec to path in torchrun's format, replacing the
// file atomically (a launcher never reads half a record). A zero Time
// means now.
func WriteErrorFile(path string, rec ErrorRecord) error {
	if rec.Time.IsZero() {
		rec.Time = time.Now()
	}
	extra := make(map[string]string, len(rec.Extra)+4)
	for k, v := range rec.Extra {
		extra[k] = v
	}
	extra["timestamp"] = strconv.FormatInt(rec.Time.Unix(), 10)
	extra["timestamp_ns"] = strconv.FormatInt(rec.Time.UnixNano(), 10)
	if rec.Signal != "" {
		extra["signal"] = rec.Signal
		if !rec.SignalTime.IsZero() {
			extra["signal_timestamp_ns"] = strconv.FormatInt(rec.SignalTime.UnixNano(), 10)
		}
	}
	b, err := json.Marshal(errorFile{Message: errorMessage{Message: rec.Message, ExtraInfo: extra}})
	if err != nil {
		return fmt.Errorf("rendezvous: error file %s: %w", path, err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".error-*.json")
	if err != nil {
		return fmt.Errorf("rendezvous: error file %s: %w", path, err)
	}
	_, werr := tmp.Write(append(b, '\n'))
	cerr := tmp.Close()
	if err := errors.Join(werr, cerr); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("rendezvous: error file %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("rendezvous: error file %s: %w", path, err)
	}
	return nil
}

// ReadErrorFile reads a record written by WriteErrorFile or by torchrun's
// error handler (whose "message" may also be a plain string, and whose
// timestamp has only seconds).
func ReadErrorFile(path string) (ErrorRecord, error) {
	f, err := os.Open(path)
	if err != nil {
		return ErrorRecord{}, fmt.Errorf("rendezvous: error file: %w", err)
	}
	defer f.Close()
	var raw struct {
		Message json.RawMessage `json:"message"`
	}
	dec := json.NewDecoder(&limitReader{f: f, left: maxErrorFileBytes})
	if err := dec.Decode(&raw); err != nil {
		return ErrorRecord{}, fmt.Errorf("rendezvous: error file %s: %w", path, err)
	}
	var msg struct {
		Message   string         `json:"message"`
		ExtraInfo map[string]any `json:"extraInfo"`
	}
	if err := json.Unmarshal(raw.Message, &msg); err != nil {
		var s string
		if err2 := json.Unmarshal(raw.Message, &s); err2 != nil {
			return ErrorRecord{}, fmt.Errorf("rendezvous: error file %s: \"message\": %w", path, err)
		}
		msg.Message = s
	}
	rec := ErrorRecord{Message: msg.Message}
	str := func(k string) string {
		switch v := msg.ExtraInfo[k].(type) {
		case string:
			return v
		case float64:
			return strconv.FormatFloat(v, 'f', -1, 64)
		}
		return ""
	}
	nanos := func(k string) time.Time {
		if n, err := strconv.ParseInt(str(k), 10, 64); err == nil && n > 0 {
			return time.Unix(0, n)
		}
		return time.Time{}
	}
	if rec.Time = nanos("timestamp_ns"); rec.Time.IsZero() {
		if s, err := strconv.ParseFloat(str("timestamp"), 64); err == nil && s > 0 {
			rec.Time = time.Unix(int64(s), 0)
		}
	}
	rec.Signal = str("signal")
	rec.SignalTime = nanos("signal_timestamp_ns")
	for k := range msg.ExtraInfo {
		switch k {
		case "timestamp", "timestamp_ns", "signal", "signal_timestamp_ns":
			continue
		}
		if v := str(k); v != "" {
			if rec.Extra == nil {
				rec.Extra = map[string]string{}
			}
			rec.Extra[k] = v
		}
	}
	return rec, nil
}

type limitReader struct {
	f    *os.File
	left int64
}

func (l *limitReader) Read(p []byte) (int, error) {
	if l.left <= 0 {
		return 0, errors.New("file larger than 1 MiB")
	}
	if int64(len(p)) > l.left {
		p = p[:l.left]
	}
	n, err := l.f.Read(p)
	l.left -= int64(n)
	return n, err
}

// Signaled is the cause (context.Cause) of a context that SignalContext
// cancelled: the process received Signal at At.
type Signaled struct {
	Signal os.Signal
	At     time.Time
}

func (s *Signaled) Error() string {
	return "rendezvous: stopped by " + SignalName(s.Signal)
}

// SignalContext is signal.NotifyContext for SIGINT and SIGTERM whose
// cause, once one arrives, is a *Signaled naming it and when it came, for
// Fail. stop releases the signals and cancels the context; call it when
// done. A signal that arrives after the first one is ignored until stop.
func SignalContext(parent context.Context) (ctx context.Context, stop context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(parent)
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		select {
		case s := <-ch:
			cancel(&Signaled{Signal: s, At: time.Now()})
		case <-ctx.Done():
		}
	}()
	return ctx, func() {
		signal.Stop(ch)
		cancel(context.Canceled)
	}
}

// Fail records err as this worker's failure for its launcher, in the file
// TORCHELASTIC_ERROR_FILE names (nothing is written when it is unset),
// noting the signal when ctx was cancelled by one (SignalContext) or err
// wraps a *Signaled (a graceful stop: distributed.Stopped), and
// returns the exit status the worker should end with: 128+N after signal
// N (the shell's convention, which cohort run reports as "stopped by
// signal N"), else 1. A worker's main typically ends with
//
//	if err != nil {
//		fmt.Fprintln(os.Stderr, "train:", err)
//		os.Exit(rendezvous.Fail(ctx, err))
//	}
//
// A record that cannot be written is reported on stderr; the status is
// returned all the same.
func Fail(ctx context.Context, err error) int {
	rec := ErrorRecord{Time: time.Now()}
	if err != nil {
		rec.Message = err.Error()
	}
	code := 1
	path := errorFilePath(os.Getenv)
	sig, at, ok := signalOf(ctx)
	if s := (*Signaled)(nil); !ok && errors.As(err, &s) {
		sig, at, ok = s.Signal, s.At, true
	}
	if ok {
		rec.Signal, rec.SignalTime = SignalName(sig), at
		if s, ok := sig.(syscall.Signal); ok && s > 0 && s < 64 {
			code = 128 + int(s)
		}
		if rec.Message == "" {
			rec.Message = "stopped by " + rec.Signal
		}
		if at.IsZero() && path != "" {
			// signal.NotifyContext does not say when; RecordSignal may have.
			if old, err := ReadErrorFile(path); err == nil && old.Signal == rec.Signal {
				rec.SignalTime = old.SignalTime
			}
		}
	}
	if path != "" {
		if werr := WriteErrorFile(path, rec); werr != nil {
			fmt.Fprintln(os.Stderr, werr)
		}
	}
	return code
}

// RecordSignal records in the error file at path, when ctx was cancelled
// by a signal (SignalContext, or signal.NotifyContext), that the signal
// stopped this worker and when, so that its launcher blames it rather
// than the peers that fail because it left, even when the worker exits
// without calling Fail (which replaces the record with its error). It
// does nothing for any other ctx, or when path is "". distributed.InitFromEnv
// calls it as the context it was given ends:
//
//	context.AfterFunc(ctx, func() { rendezvous.RecordSignal(ctx, info.ErrorFile) })
func RecordSignal(ctx context.Context, path string) {
	sig, at, ok := signalOf(ctx)
	if !ok || path == "" {
		return
	}
	if at.IsZero() {
		at = time.Now()
	}
	name := SignalName(sig)
	WriteErrorFile(path, ErrorRecord{Message: "stopped by " + name, Time: at, Signal: name, SignalTime: at})
}

// NoteSignal records in the error file TORCHELASTIC_ERROR_FILE names
// (nothing is written when it is unset) that sig reached this worker at
// at, as RecordSignal does for a context: a worker that stops gracefully
// after a signal (distributed.Stopper) notes it when it comes, so that
// its launcher blames it, not its peers, even if it is killed before it
// can call Fail.
func NoteSignal(sig os.Signal, at time.Time) {
	path := errorFilePath(os.Getenv)
	if path == "" || sig == nil {
		return
	}
	name := SignalName(sig)
	if err := WriteErrorFile(path, ErrorRecord{Message: "stopped by " + name, Time: at, Signal: name, SignalTime: at}); err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
}

// signalOf returns the signal that cancelled ctx, if one did: a
// *Signaled cause (SignalContext, which also says when), or the cause
// signal.NotifyContext gives, "<signal> signal received".
func signalOf(ctx context.Context) (os.Signal, time.Time, bool) {
	if ctx == nil || ctx.Err() == nil {
		return nil, time.Time{}, false
	}
	cause := context.Cause(ctx)
	var sig *Signaled
	if errors.As(cause, &sig) {
		return sig.Signal, sig.At, true
	}
	if cause == nil || cause == context.Canceled || cause == context.DeadlineExceeded {
		return nil, time.Time{}, false
	}
	for _, s := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT} {
		if cause.Error() == s.String()+" signal received" {
			return s, time.Time{}, true
		}
	}
	return nil, time.Time{}, false
}

// SignalName is the conventional name of sig ("SIGTERM"), or its
// description when it has none here.
func SignalName(sig os.Signal) string {
	s, ok := sig.(syscall.Signal)
	if !ok {
		return sig.String()
	}
	switch s {
	case syscall.SIGHUP:
		return "SIGHUP"
	case syscall.SIGINT:
		return "SIGINT"
	case syscall.SIGQUIT:
		return "SIGQUIT"
	case syscall.SIGABRT:
		return "SIGABRT"
	case syscall.SIGKILL:
		return "SIGKILL"
	case syscall.SIGSEGV:
		return "SIGSEGV"
	case syscall.SIGBUS:
		return "SIGBUS"
	case syscall.SIGPIPE:
		return "SIGPIPE"
	case syscall.SIGTERM:
		return "SIGTERM"
	}
	return fmt.Sprintf("signal %d (%v)", int(s), s)
}
