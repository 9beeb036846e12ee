// Package launchtest holds what the tests of programs run as real
// processes share: building and starting them, and watching their
// output.
package launchtest

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// Start starts cmd and waits for it in the background: the channel it
// returns closes once cmd has exited, after exited (when not nil) has had
// Wait's error. A cmd still running when t ends is killed and reaped. A
// failure to start fails t.
func Start(t testing.TB, cmd *exec.Cmd, exited func(err error)) <-chan struct{} {
	t.Helper()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		err := cmd.Wait()
		if exited != nil {
			exited(err)
		}
		close(done)
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-done
	})
	return done
}

// Build compiles pkgs (import paths, or directories relative to the
// working directory) into dir, each binary named after its package's
// directory, within 5 minutes. The error quotes the go tool's output.
func Build(dir string, pkgs ...string) error {
	_, err := Run(5*time.Minute, nil, "go", append([]string{"build", "-o", dir + string(filepath.Separator)}, pkgs...)...)
	return err
}

// Run runs name with args, killed after timeout, in env (nil: this
// process's environment), and returns its combined output. The error
// names the command and quotes the output.
func Run(timeout time.Duration, env []string, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = env
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.WaitDelay = 5 * time.Second // a child holding the output open
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("%s %s: %w\n%s", name, strings.Join(args, " "), err, out.String())
	}
	return out.String(), nil
}

// Output keeps what a process writes (an io.Writer safe for concurrent
// use) and wakes waiters on every write. The zero value is ready to use;
// Watch makes one that also signals when a pattern has appeared.
type Output struct {
	// Notify, when set before the first write, is called after every
	// write: a test that watches several outputs (and its processes'
	// exits) wakes its waiters through one bell.
	Notify func()

	mu     sync.Mutex
	b      bytes.Buffer
	change chan struct{} // closed and replaced on every write
	watch  *regexp.Regexp
	need   int
	hit    chan struct{}
}

// Watch returns an Output whose Hit channel closes once pattern has
// matched n times in what was written (at once when n ≤ 0).
func Watch(pattern string, n int) *Output {
	o := &Output{watch: regexp.MustCompile(pattern), need: n, hit: make(chan struct{})}
	if n <= 0 {
		close(o.hit)
	}
	return o
}

func (o *Output) Write(p []byte) (int, error) {
	if o.Notify != nil {
		defer o.Notify() // after the unlock below
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.b.Write(p)
	if o.change != nil {
		close(o.change)
		o.change = nil
	}
	if o.watch != nil && o.need > 0 && len(o.watch.FindAllIndex(o.b.Bytes(), o.need)) == o.need {
		close(o.hit)
		o.need = 0
	}
	return len(p), nil
}

// String returns everything written so far.
func (o *Output) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.b.String()
}

// Lines returns the complete lines written so far (without their
// newlines; a last line still being written is left out).
func (o *Output) Lines() []string {
	s := o.String()
	i := strings.LastIndexByte(s, '\n')
	if i < 0 {
		return nil
	}
	return strings.Split(s[:i], "\n")
}

// Hit is closed once Watch's pattern has appeared its n times; it is nil
// (never ready) for an Output made otherwise.
func (o *Output) Hit() <-chan struct{} { return o.hit }

// count returns how many times (up to n) re matches what was written so
// far, and a channel closed at the next write.
func (o *Output) count(re *regexp.Regexp, n int) (int, <-chan struct{}) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.change == nil {
		o.change = make(chan struct{})
	}
	return len(re.FindAllIndex(o.b.Bytes(), n)), o.change
}

// Wait waits up to d until re has matched n times in what was written,
// or until stop (the process's exit; nil for none) is closed and a last
// look finds fewer. It returns an error saying which.
func (o *Output) Wait(re *regexp.Regexp, n int, stop <-chan struct{}, d time.Duration) error {
	deadline := time.After(d)
	for {
		got, change := o.count(re, n)
		if got >= n {
			return nil
		}
		select {
		case <-change:
		case <-stop:
			if got, _ := o.count(re, n); got >= n {
				return nil
			}
			return fmt.Errorf("the process exited before %q appeared %d time(s)", re, n)
		case <-deadline:
			return fmt.Errorf("%q not seen %d time(s) within %v", re, n, d)
		}
	}
}
