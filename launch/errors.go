package launch

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/cohortml/cohort/distributed/rendezvous"
)

// ExitStatus is how a worker process ended.
type ExitStatus struct {
	// Code is the exit code, or -1 when the process was killed by a signal.
	Code int
	// Signal is the signal that killed the process, 0 if it exited.
	Signal syscall.Signal
}

// Failed reports whether the worker did not exit with code 0.
func (s ExitStatus) Failed() bool { return s.Code != 0 || s.Signal != 0 }

func (s ExitStatus) String() string {
	if s.Signal != 0 {
		return fmt.Sprintf("was killed by signal %d (%s)", int(s.Signal), signalName(s.Signal))
	}
	if sig, ok := s.exitSignal(); ok {
		return fmt.Sprintf("exited with code %d (128+%s: it was stopped by that signal)", s.Code, rendezvous.SignalName(sig))
	}
	return fmt.Sprintf("exited with code %d", s.Code)
}

// exitSignal reads an exit code of 128+N, for the common signals N, as
// the shell's way of saying signal N stopped the process (rendezvous.Fail
// exits so).
func (s ExitStatus) exitSignal() (syscall.Signal, bool) {
	switch sig := syscall.Signal(s.Code - 128); sig {
	case syscall.SIGHUP, syscall.SIGINT, syscall.SIGQUIT, syscall.SIGABRT, syscall.SIGKILL, syscall.SIGTERM:
		return sig, s.Signal == 0
	}
	return 0, false
}

func signalName(sig syscall.Signal) string {
	switch sig {
	case syscall.SIGKILL:
		return "SIGKILL; out of memory?"
	case syscall.SIGSEGV:
		return "SIGSEGV"
	case syscall.SIGTERM:
		return "SIGTERM"
	case syscall.SIGINT:
		return "SIGINT"
	case syscall.SIGABRT:
		return "SIGABRT"
	case syscall.SIGBUS:
		return "SIGBUS"
	}
	return sig.String()
}

// WorkerError reports the first worker of this node that failed.
type WorkerError struct {
	Rank      int // global rank
	LocalRank int
	NodeRank  int
	PID       int
	Status    ExitStatus
	// StderrTail holds the last lines the worker wrote to stderr (at most
	// Config.TailLines), oldest first.
	StderrTail []string
	// Cause is the first stderr line in which the worker stated its own
	// error (a panic's message, a flag error before its usage text), ""
	// when none did. Report puts it first: the tail may have lost it.
	Cause string
	// Restarts is how many times the workers had been restarted before
	// this failure.
	Restarts int
	// ExitTime is when the launcher saw the worker exit.
	ExitTime time.Time
	// ErrorFile is the worker's TORCHELASTIC_ERROR_FILE, and Record what
	// the worker wrote there (rendezvous.Fail); nil when it wrote nothing.
	ErrorFile string
	Record    *rendezvous.ErrorRecord
	// StderrLog is the file holding the worker's whole stderr
	// (Config.LogDir); "" without one.
	StderrLog string
	// Others summarises the other workers of this node that failed after
	// it in the same generation (usually because it failed), in order.
	Others []string
}

func (e *WorkerError) Error() string {
	return "launch: " + e.summary()
}

func (e *WorkerError) summary() string {
	return fmt.Sprintf("rank %d (local rank %d on node %d, pid %d) %s", e.Rank, e.LocalRank, e.NodeRank, e.PID, e.how())
}

// how says how the worker ended: its exit status, and the signal its
// error file names when the status does not show it.
func (e *WorkerError) how() string {
	if e.Record != nil && e.Record.Signal != "" && e.Status.Signal == 0 {
		if _, ok := e.Status.exitSignal(); !ok {
			return fmt.Sprintf("was stopped by %s (then %s)", e.Record.Signal, e.Status)
		}
	}
	return e.Status.String()
}

// failedAt is when the worker's failure began, as far as the launcher
// knows: the signal that stopped it, the failure it recorded, or its exit,
// whichever is earliest.
func (e *WorkerError) failedAt() time.Time {
	t := e.ExitTime
	if r := e.Record; r != nil {
		for _, rt := range []time.Time{r.SignalTime, r.Time} {
			if !rt.IsZero() && (t.IsZero() || rt.Before(t)) {
				t = rt
			}
		}
	}
	return t
}

// blame picks, among the failed workers of one generation (in the order
// their exits were seen), the one whose failure began first: the root
// cause, the others failing because it left (a peer's abort notice, the
// launcher's SIGTERM). A worker stopped from outside by a signal records
// when the signal came, so it is named rather than the peers that saw it
// go; ties go to the earlier exit. The others are listed in its Others.
func blame(failed []*WorkerError) *WorkerError {
	if len(failed) == 0 {
		return nil
	}
	first := 0
	for i, f := range failed {
		if f.failedAt().Before(failed[first].failedAt()) {
			first = i
		}
	}
	root := *failed[first]
	root.Others = nil
	for i, f := range failed {
		if i != first {
			other := fmt.Sprintf("rank %d %s", f.Rank, f.how())
			// What it recorded, unless only the signal: a rank that stopped
			// gracefully with the blamed one says whether it saved.
			if r := f.Record; r != nil && r.Message != "" && r.Message != "stopped by "+r.Signal {
				other += ": " + r.Message
			}
			root.Others = append(root.Others, other)
		}
	}
	return &root
}

// Report is a multi-line account for the user: the failure, then the tail
// of the worker's stderr.
func (e *WorkerError) Report() string {
	var b strings.Builder
	fmt.Fprintf(&b, "rank %d failed: local rank %d on node %d, pid %d, %s", e.Rank, e.LocalRank, e.NodeRank, e.PID, e.how())
	if e.Restarts > 0 {
		fmt.Fprintf(&b, " (after %d restarts)", e.Restarts)
	}
	b.WriteString("\n")
	if e.Cause != "" {
		fmt.Fprintf(&b, "its error line: %s\n", e.Cause)
	}
	if e.Record != nil {
		fmt.Fprintf(&b, "its error (%s): %s\n", e.ErrorFile, e.Record.Message)
	}
	if len(e.Others) > 0 {
		fmt.Fprintf(&b, "after it: %s\n", strings.Join(e.Others, "; "))
	}
	if e.StderrLog != "" {
		fmt.Fprintf(&b, "its whole stderr: %s\n", e.StderrLog)
	}
	if len(e.StderrTail) == 0 {
		b.WriteString("(it wrote nothing to stderr)\n")
		return b.String()
	}
	fmt.Fprintf(&b, "last %d lines of its stderr:\n", len(e.StderrTail))
	for _, l := range e.StderrTail {
		fmt.Fprintf(&b, "  [rank %d] %s\n", e.Rank, l)
	}
	return b.String()
}

// RemoteError reports that the workers were stopped because a worker on
// another node failed, or because this node lost the job's store.
type RemoteError struct {
	Msg string
}

func (e *RemoteError) Error() string { return "launch: stopped: " + e.Msg }

// SignalError reports that the launcher was asked to stop by a signal,
// which it forwarded to the workers.
type SignalError struct {
	Signal os.Signal
	// Workers says how each of this node's workers ended, in local rank
	// order: its exit status and what it recorded in its error file (a
	// program that stops gracefully says there whether it saved a
	// checkpoint). Empty when the signal came before any worker started.
	Workers []WorkerStop
}

// WorkerStop is how one worker ended after a signal.
type WorkerStop struct {
	Rank   int
	Status ExitStatus
	// Message is what the worker recorded in its error file; "" if
	// nothing.
	Message string
}

func (e *SignalError) Error() string { return fmt.Sprintf("launch: stopped by signal %v", e.Signal) }

// Report is a multi-line account for the user: the signal, then how each
// worker ended. A worker that exited 128+N after finishing its step
// stopped gracefully; one killed by SIGKILL did not stop within the grace
// period.
func (e *SignalError) Report() string {
	var b strings.Builder
	fmt.Fprintf(&b, "stopped by %s", rendezvous.SignalName(e.Signal))
	if len(e.Workers) == 0 {
		b.WriteString(" before any worker started\n")
		return b.String()
	}
	b.WriteString(", forwarded to the workers:\n")
	for _, w := range e.Workers {
		if w.Status.Signal == syscall.SIGKILL {
			fmt.Fprintf(&b, "  rank %d was killed (SIGKILL): it did not stop within the grace period, or a second signal came", w.Rank)
		} else {
			fmt.Fprintf(&b, "  rank %d %s", w.Rank, w.Status)
		}
		if w.Message != "" {
			fmt.Fprintf(&b, ": %s", w.Message)
		}
		b.WriteString("\n")
	}
	return b.String()
}

// ExitCode is the conventional shell status for the signal: 128 + its
// number.
func (e *SignalError) ExitCode() int {
	if s, ok := e.Signal.(syscall.Signal); ok {
		return 128 + int(s)
	}
	return 1
}

// errCanceled marks an outcome caused by Run's context; Run replaces it
// with the context's error.
var errCanceled = errors.New("launch: canceled")
