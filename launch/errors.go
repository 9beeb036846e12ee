package launch

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
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
	return fmt.Sprintf("exited with code %d", s.Code)
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
	// Restarts is how many times the workers had been restarted before
	// this failure.
	Restarts int
}

func (e *WorkerError) Error() string {
	return "launch: " + e.summary()
}

func (e *WorkerError) summary() string {
	return fmt.Sprintf("rank %d (local rank %d on node %d, pid %d) %s", e.Rank, e.LocalRank, e.NodeRank, e.PID, e.Status)
}

// Report is a multi-line account for the user: the failure, then the tail
// of the worker's stderr.
func (e *WorkerError) Report() string {
	var b strings.Builder
	fmt.Fprintf(&b, "rank %d failed: local rank %d on node %d, pid %d, %s", e.Rank, e.LocalRank, e.NodeRank, e.PID, e.Status)
	if e.Restarts > 0 {
		fmt.Fprintf(&b, " (after %d restarts)", e.Restarts)
	}
	b.WriteString("\n")
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
}

func (e *SignalError) Error() string { return fmt.Sprintf("launch: stopped by signal %v", e.Signal) }

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
