package launch

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"time"
)

// drainTimeout bounds how long output is read after a worker exits: a
// descendant outside its process group may hold the pipes open.
const drainTimeout = 2 * time.Second

// worker is one running worker process.
type worker struct {
	local, rank int
	cmd         *exec.Cmd
	pid         int
	stderrTail  *tail
}

// startWorker starts one worker and the goroutines that stream its output
// and wait for it. When the process has exited and its output is drained,
// the exit is sent on exits. The caller owns the goroutines through
// spawned: each signals it once, when done.
func startWorker(path string, args, env []string, dir string, local, rank int, out, errOut *lineWriter, tailLines int, exits chan<- event, spawned chan<- struct{}) (*worker, error) {
	cmd := exec.Command(path, args...)
	cmd.Env = env
	cmd.Dir = dir
	cmd.SysProcAttr = sysProcAttr()
	outR, outW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("launch: rank %d: stdout pipe: %w", rank, err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		return nil, fmt.Errorf("launch: rank %d: stderr pipe: %w", rank, err)
	}
	cmd.Stdout, cmd.Stderr = outW, errW
	if err := cmd.Start(); err != nil {
		outR.Close()
		outW.Close()
		errR.Close()
		errW.Close()
		return nil, fmt.Errorf("launch: starting rank %d: %w", rank, err)
	}
	// The child holds its own copies of the write ends.
	outW.Close()
	errW.Close()
	w := &worker{local: local, rank: rank, cmd: cmd, pid: cmd.Process.Pid, stderrTail: newTail(tailLines)}
	prefix := []byte("[rank " + strconv.Itoa(rank) + "] ")
	outDone, errDone := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(outDone)
		pump(outR, prefix, out, nil)
	}()
	go func() {
		defer close(errDone)
		pump(errR, prefix, errOut, w.stderrTail)
	}()
	go func() {
		defer func() { spawned <- struct{}{} }()
		st := waitStatus(cmd.Wait())
		// Read what is left; cut off descendants that keep the pipes.
		deadline := time.Now().Add(drainTimeout)
		outR.SetReadDeadline(deadline)
		errR.SetReadDeadline(deadline)
		<-outDone
		<-errDone
		outR.Close()
		errR.Close()
		exits <- event{kind: evExit, local: local, status: st}
	}()
	return w, nil
}

// waitStatus turns cmd.Wait's error into an ExitStatus.
func waitStatus(err error) ExitStatus {
	if err == nil {
		return ExitStatus{}
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return ExitStatus{Code: -1, Signal: ws.Signal()}
		}
		return ExitStatus{Code: ee.ExitCode()}
	}
	return ExitStatus{Code: -1}
}

// signalGroup sends sig to the worker's process group. A group that is
// already gone is not an error.
func (w *worker) signalGroup(sig syscall.Signal) error {
	err := syscall.Kill(-w.pid, sig)
	if err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("launch: signal %v to rank %d (pid %d): %w", sig, w.rank, w.pid, err)
	}
	return nil
}
