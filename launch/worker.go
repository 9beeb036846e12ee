package launch

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
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
	// errorFile is the worker's TORCHELASTIC_ERROR_FILE; logs are its
	// output files ("" without Config.LogDir).
	errorFile            string
	stdoutLog, stderrLog string
	// exitTime is set by the waiter goroutine before it sends the exit
	// event, and read only after that event is received.
	exitTime time.Time
	// status is how the worker ended, and exited whether it has: set by
	// the supervising goroutine when it receives the exit event.
	status ExitStatus
	exited bool
}

// workerSpec says how to start one worker.
type workerSpec struct {
	path      string
	args, env []string
	dir       string
	local     int
	rank      int
	// out and errOut are the console streams; nil leaves the console out
	// (Config.LogDir without Tee).
	out, errOut *lineWriter
	// logDir, when set, receives stdout.log and stderr.log.
	logDir    string
	errorFile string
	tailLines int
	// cpus, when set, are the CPUs the worker is bound to.
	cpus []int
}

// startWorker starts one worker and the goroutines that stream its output
// and wait for it. When the process has exited and its output is drained,
// the exit is sent on exits. The caller owns the goroutines through
// spawned: each signals it once, when done.
func startWorker(sp workerSpec, exits chan<- event, spawned chan<- struct{}) (*worker, error) {
	rank := sp.rank
	prefix := []byte("[rank " + strconv.Itoa(rank) + "] ")
	var outSinks, errSinks []sink
	if sp.out != nil {
		outSinks = append(outSinks, sink{w: sp.out, prefix: prefix})
	}
	if sp.errOut != nil {
		errSinks = append(errSinks, sink{w: sp.errOut, prefix: prefix})
	}
	var files []*os.File
	closeFiles := func() {
		for _, f := range files {
			f.Close()
		}
	}
	var stdoutLog, stderrLog string
	if sp.logDir != "" {
		stdoutLog, stderrLog = filepath.Join(sp.logDir, "stdout.log"), filepath.Join(sp.logDir, "stderr.log")
		for _, l := range []struct {
			path  string
			sinks *[]sink
		}{{stdoutLog, &outSinks}, {stderrLog, &errSinks}} {
			f, err := os.OpenFile(l.path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
			if err != nil {
				closeFiles()
				return nil, fmt.Errorf("launch: rank %d: log file: %w", rank, err)
			}
			files = append(files, f)
			*l.sinks = append(*l.sinks, sink{w: &lineWriter{w: f}})
		}
	}
	cmd := exec.Command(sp.path, sp.args...)
	cmd.Env = sp.env
	cmd.Dir = sp.dir
	cmd.SysProcAttr = sysProcAttr()
	outR, outW, err := os.Pipe()
	if err != nil {
		closeFiles()
		return nil, fmt.Errorf("launch: rank %d: stdout pipe: %w", rank, err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		closeFiles()
		outR.Close()
		outW.Close()
		return nil, fmt.Errorf("launch: rank %d: stderr pipe: %w", rank, err)
	}
	cmd.Stdout, cmd.Stderr = outW, errW
	if err := startOn(cmd, sp.cpus); err != nil {
		closeFiles()
		outR.Close()
		outW.Close()
		errR.Close()
		errW.Close()
		return nil, fmt.Errorf("launch: starting rank %d: %w", rank, err)
	}
	// The child holds its own copies of the write ends.
	outW.Close()
	errW.Close()
	w := &worker{local: sp.local, rank: rank, cmd: cmd, pid: cmd.Process.Pid, stderrTail: newTail(sp.tailLines),
		errorFile: sp.errorFile, stdoutLog: stdoutLog, stderrLog: stderrLog}
	outDone, errDone := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(outDone)
		pump(outR, outSinks, nil)
	}()
	go func() {
		defer close(errDone)
		pump(errR, errSinks, w.stderrTail)
	}()
	go func() {
		defer func() { spawned <- struct{}{} }()
		st := waitStatus(cmd.Wait())
		w.exitTime = time.Now()
		// Read what is left; cut off descendants that keep the pipes.
		deadline := time.Now().Add(drainTimeout)
		outR.SetReadDeadline(deadline)
		errR.SetReadDeadline(deadline)
		<-outDone
		<-errDone
		outR.Close()
		errR.Close()
		closeFiles()
		exits <- event{kind: evExit, local: sp.local, status: st}
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
