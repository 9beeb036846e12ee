package shm

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cohortml/cohort/distributed/transport"
	"github.com/cohortml/cohort/distributed/transport/transporttest"
)

func TestListenRejectsBadArguments(t *testing.T) {
	transporttest.RunBadListen(t, Listen, []transporttest.BadListen[Options]{
		{Name: "world-zero", Rank: 0, World: 0, Opts: Options{}, Want: "shm: world size 0, want >= 1"},
		{Name: "rank-too-high", Rank: 3, World: 3, Opts: Options{}, Want: "shm: rank 3 out of range [0, 3)"},
		{Name: "prefix", Rank: 0, World: 2, Opts: Options{Prefix: "a/b"}, Want: `shm: Options.Prefix "a/b": want 1 to 64 letters`},
		{Name: "ring-not-power-of-two", Rank: 0, World: 2, Opts: Options{RingBytes: 100_000}, Want: "shm: Options.RingBytes 100000: want a power of two in [65536, 1073741824]"},
		{Name: "ring-too-small", Rank: 0, World: 2, Opts: Options{RingBytes: 4096}, Want: "shm: Options.RingBytes 4096: want a power of two"},
		{Name: "no-dir", Rank: 0, World: 2, Opts: Options{Dir: "/nonexistent-cohort-dir"}, Want: "shm: create segment /nonexistent-cohort-dir/"},
	})
}

func TestListenerCloseRemovesFiles(t *testing.T) {
	l, err := Listen(context.Background(), 0, 2, Options{Prefix: testPrefix})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{l.Addr(), l.Addr() + ".sock"} {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("%s: %v", p, err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if files := leftovers(t); len(files) > 0 {
		t.Fatalf("left behind: %v", files)
	}
}

func TestConnectRejectsBadAddresses(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	other3, err := Listen(ctx, 1, 3, Options{Prefix: testPrefix})
	if err != nil {
		t.Fatal(err)
	}
	defer other3.Close()
	other2, err := Listen(ctx, 0, 2, Options{Prefix: testPrefix})
	if err != nil {
		t.Fatal(err)
	}
	defer other2.Close()
	notSegment := t.TempDir() + "/plain"
	os.WriteFile(notSegment, make([]byte, 8192), 0o600)
	tests := []struct {
		name  string
		addrs func(self string) []string
		want  string
	}{
		{"count", func(self string) []string { return []string{self} }, "1 peer addresses for world size 2"},
		{"empty", func(self string) []string { return []string{"", self} }, "no address for rank 0"},
		{"missing-file", func(self string) []string { return []string{"/dev/shm/cohort-test-none", self} }, "open segment of rank 0"},
		{"not-a-segment", func(self string) []string { return []string{notSegment, self} }, "is not a segment"},
		{"wrong-world", func(self string) []string { return []string{other3.Addr(), self} }, "is for world size 3"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l, err := Listen(ctx, 1, 2, Options{Prefix: testPrefix})
			if err != nil {
				t.Fatal(err)
			}
			_, err = l.Connect(ctx, tc.addrs(l.Addr()))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want it to contain %q", err, tc.want)
			}
			if _, serr := os.Stat(l.Addr()); serr == nil {
				t.Fatal("segment file left after a failed Connect")
			}
		})
	}
	t.Run("wrong-rank", func(t *testing.T) {
		l, err := Listen(ctx, 0, 2, Options{Prefix: testPrefix})
		if err != nil {
			t.Fatal(err)
		}
		// other2 is rank 0's segment, given as rank 1's address.
		_, err = l.Connect(ctx, []string{l.Addr(), other2.Addr()})
		if err == nil || !strings.Contains(err.Error(), "the address given for rank 1 is rank 0's segment") {
			t.Fatalf("got %v", err)
		}
	})
}

func TestWrongTokenRefused(t *testing.T) {
	defer transporttest.CheckGoroutines(t, runtime.NumGoroutine())
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	toks := []string{"right", "wrong"}
	ls := transporttest.ListenAll(t, ctx, 2, func(ctx context.Context, r int) (*Listener, error) {
		return Listen(ctx, r, 2, Options{Token: []byte(toks[r]), Prefix: testPrefix})
	})
	errs := transporttest.ConnectErrors[*Transport](ctx, ls)
	if !errors.Is(errs[1], transport.ErrAuth) {
		t.Errorf("dialer: %v, want an error wrapping ErrAuth", errs[1])
	}
	if errs[0] == nil || !strings.Contains(errs[0].Error(), "authentication failed") {
		t.Errorf("acceptor: %v", errs[0])
	}
	if files := leftovers(t); len(files) > 0 {
		t.Errorf("left behind: %v", files)
	}
}

// TestSmallRings runs the conformance suite with the smallest rings, so
// long messages wrap many times and senders wait for space constantly.
func TestSmallRings(t *testing.T) {
	if testing.Short() {
		t.Skip("long")
	}
	small := func(tb testing.TB, n int) transporttest.World {
		ts, errs := connectWorld(tb, n, func(int) Options {
			return Options{Prefix: testPrefix, RingBytes: minRing, Spin: -1}
		})
		return transporttest.WorldOf(tb, ts, errs, (*Transport).kill)
	}
	transporttest.Run(t, small, transporttest.Config{Worlds: []int{2, 3}, LargeBytes: 3<<20 + 7})
}

// TestProtocolErrorBreaksLink: a record header that is not one fails the
// receiver's calls and the sender's next ones.
func TestProtocolErrorBreaksLink(t *testing.T) {
	ts, errs := connectWorld(t, 2, func(int) Options { return Options{Prefix: testPrefix} })
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	defer ts[0].Close()
	defer ts[1].Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- ts[0].Recv(ctx, 1, transport.Tag{}, make([]byte, 4)) }()
	// Rank 1 publishes 32 bytes of garbage into its ring to rank 0.
	p := ts[1].peers[0]
	p.mu.Lock()
	copy(p.out.data, strings.Repeat("x", 32))
	p.outHead += 32
	p.publish(p.outHead, transport.Tag{})
	p.mu.Unlock()
	err := <-done
	var pe *transport.PeerError
	if !errors.As(err, &pe) || pe.Peer != 1 || !strings.Contains(err.Error(), "protocol error: wire: not a cohort frame") {
		t.Fatalf("receiver: %v", err)
	}
	// The sender learns of it over the liveness channel.
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := ts[1].Send(ctx, 0, transport.Tag{}, []byte("more"))
		if err != nil {
			if !strings.Contains(err.Error(), "rank 0 dropped the link") {
				t.Fatalf("sender: %v", err)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("sender still sending 5 s after the receiver dropped the link")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestListenReclaimsDeadJobsFiles: files left by a process killed during
// setup (its pid gone) are removed by the next Listen with the same
// prefix; files of live processes and of other prefixes are kept.
func TestListenReclaimsDeadJobsFiles(t *testing.T) {
	dir := t.TempDir()
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Skipf("cannot run a child to get a dead pid: %v", err)
	}
	id := "0123456789abcdef"
	name := func(prefix string, pid int) string { return fmt.Sprintf("%s-%d-1-%s", prefix, pid, id) }
	stale := []string{name(testPrefix, dead.Process.Pid), name(testPrefix, dead.Process.Pid) + ".sock"}
	kept := []string{name(testPrefix, os.Getpid()), name("other", dead.Process.Pid), testPrefix + "-notes.txt"}
	for _, f := range append(slices.Clone(stale), kept...) {
		if err := os.WriteFile(filepath.Join(dir, f), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	l, err := Listen(context.Background(), 0, 2, Options{Prefix: testPrefix, Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for _, f := range stale {
		if _, err := os.Stat(filepath.Join(dir, f)); !os.IsNotExist(err) {
			t.Errorf("stale %s still there (%v)", f, err)
		}
	}
	for _, f := range kept {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("%s was removed: %v", f, err)
		}
	}
}
