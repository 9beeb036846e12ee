package launchtest

import (
	"errors"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"testing"
	"time"
)

func TestOutputWatch(t *testing.T) {
	o := Watch(`ready\n`, 2)
	o.Write([]byte("rank 0 rea"))
	o.Write([]byte("dy\n")) // a match split across writes counts
	select {
	case <-o.Hit():
		t.Fatal("hit after one of two matches")
	default:
	}
	o.Write([]byte("rank 1 ready\n"))
	select {
	case <-o.Hit():
	case <-time.After(time.Second):
		t.Fatal("no hit after two matches")
	}
	o.Write([]byte("ready\n")) // a third match must not close Hit again
	if got, want := o.String(), "rank 0 ready\nrank 1 ready\nready\n"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	select {
	case <-Watch(`x`, 0).Hit():
	default:
		t.Error("Watch(_, 0) is not hit at once")
	}
}

func TestOutputWait(t *testing.T) {
	var o Output
	re := regexp.MustCompile(`step 5`)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for _, s := range []string{"step 4\n", "step 5\n"} {
			o.Write([]byte(s))
		}
	}()
	if err := o.Wait(re, 1, nil, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	<-done
	exited := make(chan struct{})
	close(exited)
	if err := o.Wait(regexp.MustCompile(`never`), 1, exited, 10*time.Second); err == nil {
		t.Error("Wait after the process exited without the pattern returned nil")
	}
	if err := o.Wait(regexp.MustCompile(`step`), 3, nil, 10*time.Millisecond); err == nil {
		t.Error("Wait for a third match of two, past its deadline, returned nil")
	}
}

func TestChildren(t *testing.T) {
	if _, err := os.Stat("/proc/self/task"); err != nil {
		t.Skip("no /proc")
	}
	cmd := exec.Command("sleep", "30")
	cmd.Env = append(os.Environ(), "LAUNCHTEST_MARK=child")
	if err := cmd.Start(); err != nil {
		t.Skip(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	if !slices.Contains(Children(os.Getpid()), cmd.Process.Pid) {
		t.Errorf("Children(%d) = %v, want it to hold %d", os.Getpid(), Children(os.Getpid()), cmd.Process.Pid)
	}
	if pid, ok := ChildWithEnv(os.Getpid(), "LAUNCHTEST_MARK=child"); !ok || pid != cmd.Process.Pid {
		t.Errorf("ChildWithEnv = %d, %v; want %d", pid, ok, cmd.Process.Pid)
	}
	if _, ok := ChildWithEnv(os.Getpid(), "LAUNCHTEST_MARK=none"); ok {
		t.Error("ChildWithEnv found a child with a variable none has")
	}
}

func TestOutputLinesNotify(t *testing.T) {
	writes := 0
	o := &Output{Notify: func() { writes++ }}
	if l := o.Lines(); l != nil {
		t.Errorf("Lines() of nothing = %q", l)
	}
	o.Write([]byte("a\nb"))
	if l := o.Lines(); !slices.Equal(l, []string{"a"}) {
		t.Errorf("Lines() = %q, want [a] (b is not finished)", l)
	}
	o.Write([]byte("c\n\n"))
	if l := o.Lines(); !slices.Equal(l, []string{"a", "bc", ""}) {
		t.Errorf("Lines() = %q, want [a bc \"\"]", l)
	}
	if writes != 2 {
		t.Errorf("Notify called %d times for 2 writes", writes)
	}
}

func TestStart(t *testing.T) {
	var got error
	done := Start(t, exec.Command("sh", "-c", "exit 3"), func(err error) { got = err })
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("sh did not exit within 30 s")
	}
	var ee *exec.ExitError
	if !errors.As(got, &ee) || ee.ExitCode() != 3 {
		t.Errorf("exited with %v, want exit status 3", got)
	}
	t.Run("killed at the end", func(t *testing.T) {
		cmd := exec.Command("sleep", "30")
		done = Start(t, cmd, nil)
	})
	select {
	case <-done:
	default:
		t.Error("a command still running when its test ended was not killed and reaped")
	}
}
