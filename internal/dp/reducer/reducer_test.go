package reducer

import (
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
)

// fakeIO logs every call the Reducer makes. Buckets are laid out by
// splitting the order into runs of per parameters.
type fakeIO struct {
	log      *strings.Builder
	per      int
	fail     map[int]bool // buckets whose Finish fails
	takeFail map[int]bool // parameters whose Take fails
	root     []int        // order Agree returns instead of the local one
}

type fakeHandle struct {
	io   *fakeIO
	k    int
	done chan struct{}
}

func (h *fakeHandle) Done() <-chan struct{} { return h.done }
func (h *fakeHandle) Finish() error {
	fmt.Fprintf(h.io.log, "finish bucket %d\n", h.k)
	if h.io.fail[h.k] {
		return fmt.Errorf("bucket %d failed", h.k)
	}
	return nil
}

func (io *fakeIO) Take(i int, used bool) error {
	if used {
		fmt.Fprintf(io.log, "take %d\n", i)
	} else {
		fmt.Fprintf(io.log, "take %d unused\n", i)
	}
	if io.takeFail[i] {
		return fmt.Errorf("take %d failed", i)
	}
	return nil
}

func (io *fakeIO) Start(k int) Handle {
	fmt.Fprintf(io.log, "start bucket %d\n", k)
	return &fakeHandle{io: io, k: k, done: make(chan struct{})}
}

func (io *fakeIO) Agree(order []int) ([]int, error) {
	fmt.Fprintf(io.log, "agree local %v", order)
	if io.root != nil {
		order = io.root
		fmt.Fprintf(io.log, " root %v", order)
	}
	io.log.WriteString("\n")
	return order, nil
}

func (io *fakeIO) Replan(order []int) ([][]int, error) {
	b := chunk(order, io.per)
	fmt.Fprintf(io.log, "replan %v\n", b)
	return b, nil
}

func chunk(order []int, per int) [][]int {
	var out [][]int
	for len(order) > 0 {
		n := min(per, len(order))
		out = append(out, append([]int(nil), order[:n]...))
		order = order[n:]
	}
	return out
}

func ints(fields []string) ([]int, error) {
	var out []int
	for _, f := range fields {
		v, err := strconv.Atoi(f)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

// run executes one command against the reducer, logging into io.log.
func run(r **Reducer, io *fakeIO, cmd string) error {
	f := strings.Fields(cmd)
	switch f[0] {
	case "new": // new <params> <per> [trainable ids...]: buckets in reverse order
		n, _ := strconv.Atoi(f[1])
		io.per, _ = strconv.Atoi(f[2])
		tr, err := ints(f[3:])
		if err != nil {
			return err
		}
		if len(tr) == 0 {
			for i := range n {
				tr = append(tr, i)
			}
		}
		var order []int
		for k := len(tr) - 1; k >= 0; k-- {
			order = append(order, tr[k])
		}
		b := chunk(order, io.per)
		fmt.Fprintf(io.log, "buckets %v\n", b)
		nr, err := New(n, b, io, false)
		*r = nr
		return err
	case "arm":
		(*r).Arm(len(f) < 2 || f[1] != "nosync", len(f) > 1 && f[1] == "shadow")
	case "ready":
		for _, s := range f[1:] {
			i, _ := strconv.Atoi(s)
			if err := (*r).Ready(i); err != nil {
				fmt.Fprintf(io.log, "error: %v\n", err)
			}
		}
	case "start-all":
		(*r).StartAll()
	case "fail":
		k, _ := strconv.Atoi(f[1])
		io.fail[k] = true
	case "take-fail":
		k, _ := strconv.Atoi(f[1])
		io.takeFail[k] = true
	case "root":
		io.root, _ = ints(f[1:])
	case "done": // backward done
		unused, takeErr, err := (*r).Finish()
		fmt.Fprintf(io.log, "unused %v", unused)
		if takeErr != nil {
			fmt.Fprintf(io.log, " take error: %v", takeErr)
		}
		if err != nil {
			fmt.Fprintf(io.log, " error: %v", err)
		}
		io.log.WriteString("\n")
		if err == nil {
			if err := (*r).Rebuild(); err != nil {
				return err
			}
		}
	case "state":
		fmt.Fprintf(io.log, "armed %v syncing %v inflight %v allstarted %v rebuilt %v buckets %v\n",
			(*r).Armed(), (*r).Syncing(), (*r).InFlight(), (*r).AllStarted(), (*r).Rebuilt(), (*r).Buckets())
	default:
		return errors.New("unknown command " + f[0])
	}
	return nil
}

// TestTranscripts replays the datadriven transcripts in testdata/*.txt:
// each directive is a command, and its output what the Reducer did.
// -rewrite rewrites the files (review the diff).
func TestTranscripts(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join("testdata", "*.txt"))
	if len(files) == 0 {
		t.Fatal("no transcripts in testdata")
	}
	for _, path := range files {
		t.Run(filepath.Base(path), func(t *testing.T) {
			var r *Reducer
			var log strings.Builder
			io := &fakeIO{log: &log, fail: map[int]bool{}, takeFail: map[int]bool{}}
			datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
				f := []string{d.Cmd}
				for _, a := range d.CmdArgs {
					f = append(f, a.String())
				}
				log.Reset()
				if err := run(&r, io, strings.Join(f, " ")); err != nil {
					fmt.Fprintf(&log, "command error: %v\n", err)
				}
				return log.String()
			})
		})
	}
}

func TestNewRejectsBadLayouts(t *testing.T) {
	io := &fakeIO{log: &strings.Builder{}}
	tests := []struct {
		name    string
		buckets [][]int
		want    string
	}{
		{"out of range", [][]int{{0, 3}}, "names parameter 3"},
		{"twice", [][]int{{0}, {1, 0}}, "in buckets 0 and 1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(3, tt.buckets, io, false)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want %q", err, tt.want)
			}
		})
	}
	if _, err := New(3, nil, nil, false); err == nil {
		t.Fatal("nil IO accepted")
	}
}

// observerIO is a fakeIO that is also an Observer and whose handles the
// test completes by hand.
type observerIO struct {
	fakeIO
	handles []*fakeHandle
	seen    []int
}

func (io *observerIO) Start(k int) Handle {
	h := io.fakeIO.Start(k).(*fakeHandle)
	io.handles = append(io.handles, h)
	return h
}

func (io *observerIO) Seen(k int) { io.seen = append(io.seen, k) }

// TestObserverSeesEachBucketOnce checks that an Observer IO hears of every
// started bucket exactly once per step, when a poll (a later Ready, or
// Finish before each bucket) first sees it complete, and that Times
// agrees.
func TestObserverSeesEachBucketOnce(t *testing.T) {
	io := &observerIO{fakeIO: fakeIO{log: &strings.Builder{}, per: 1}}
	r, err := New(4, chunk([]int{3, 2, 1, 0}, 1), io, true)
	if err != nil {
		t.Fatal(err)
	}
	for step := range 2 {
		io.handles, io.seen = nil, nil
		r.Arm(true, false)
		ready := func(i int) {
			if err := r.Ready(i); err != nil {
				t.Fatal(err)
			}
		}
		ready(3) // starts bucket 0
		close(io.handles[0].done)
		ready(2) // sees bucket 0 done, starts bucket 1
		if want := []int{0}; fmt.Sprint(io.seen) != fmt.Sprint(want) {
			t.Fatalf("step %d: seen %v after bucket 0 completed, want %v", step, io.seen, want)
		}
		ready(1)
		ready(0) // buckets 2 and 3 started
		close(io.handles[2].done)
		if _, _, err := r.Finish(); err != nil {
			t.Fatal(err)
		}
		if want := []int{0, 2, 1, 3}; fmt.Sprint(io.seen) != fmt.Sprint(want) {
			t.Fatalf("step %d: seen %v, want %v (bucket 2 seen by the poll before bucket 0 finishes)", step, io.seen, want)
		}
		for k := range 4 {
			if launched, done := r.Times(k); launched.IsZero() || done.Before(launched) {
				t.Fatalf("step %d: bucket %d times %v, %v", step, k, launched, done)
			}
		}
	}
}
