// Package proctest runs test cases whose ranks are real processes: copies
// of the calling test binary started by the launcher, each joining the
// job's process group, training, and writing its final parameters to a
// file the parent test reads back. Test code only.
package proctest

import (
	"bytes"
	"context"
	"encoding/gob"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/cohortml/cohort/distributed"
	_ "github.com/cohortml/cohort/distributed/backend/all" // the native and MPI backends
	"github.com/cohortml/cohort/distributed/rendezvous"
	"github.com/cohortml/cohort/launch"
)

// Env names the two variables a parent test sets for its rank processes:
// Case selects the case, Out the folder the ranks write to.
type Env struct{ Case, Out string }

// Child reports the case this process runs as a rank ("" in the parent
// test).
func (e Env) Child() string { return os.Getenv(e.Case) }

// Timeouts bounds a case: the whole launch, a rank's run, and each
// collective of its process group.
type Timeouts struct{ Launch, Rank, Op time.Duration }

// Short is the default Timeouts: 1 minute, 45 s, 30 s.
var Short = Timeouts{Launch: time.Minute, Rank: 45 * time.Second, Op: 30 * time.Second}

// Long allows GPT-mini steps on a loaded machine: 2 minutes, 90 s, 1 minute.
var Long = Timeouts{Launch: 2 * time.Minute, Rank: 90 * time.Second, Op: time.Minute}

// Launch runs world copies of this test binary restricted to the test
// named test (a top-level Test function), with e.Case set to name, and
// returns every rank's parameters in rank order (see LaunchOf).
func (e Env) Launch(t *testing.T, test, name string, world int) [][][]float32 {
	t.Helper()
	return LaunchOf[[][]float32](t, e, test, name, world, Short)
}

// Rank is the body of one rank process (see RankOf) whose train returns
// its parameters.
func (e Env) Rank(t *testing.T, transport string, train func(ctx context.Context, pg distributed.ProcessGroup) ([][]float32, error)) {
	t.Helper()
	RankOf(t, e, transport, Short, train)
}

// LaunchOf runs world copies of this test binary restricted to the test
// named test, with e.Case set to name, and returns what every rank's
// RankOf wrote, in rank order. It fails t with the ranks' output if a
// rank fails or writes nothing.
func LaunchOf[T any](t *testing.T, e Env, test, name string, world int, to Timeouts) []T {
	t.Helper()
	dir := t.TempDir()
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), to.Launch)
	defer cancel()
	err := launch.Run(ctx, launch.Config{
		NProcPerNode: world,
		Program:      os.Args[0],
		Args:         []string{"-test.run=^" + test + "$", "-test.timeout=" + to.Launch.String()},
		Env:          append(os.Environ(), e.Case+"="+name, e.Out+"="+dir),
		Stdout:       &out,
		Stderr:       &out,
	})
	if err != nil {
		t.Fatalf("ranks failed: %v\nrank output:\n%s", err, out.String())
	}
	got := make([]T, world)
	for r := range got {
		b, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("rank%d.gob", r)))
		if err != nil {
			t.Fatalf("rank %d wrote nothing: %v\nrank output:\n%s", r, err, out.String())
		}
		if err := gob.NewDecoder(bytes.NewReader(b)).Decode(&got[r]); err != nil {
			t.Fatalf("rank %d's result: %v", r, err)
		}
	}
	return got
}

// RankOf is the body of one rank process: it joins the job's process
// group over transport, runs train and writes what it returns for the
// parent (gob), then waits for every rank (no rank closes its links while
// another still reads).
func RankOf[T any](t *testing.T, e Env, transport string, to Timeouts, train func(ctx context.Context, pg distributed.ProcessGroup) (T, error)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), to.Rank)
	defer cancel()
	info, err := rendezvous.FromEnv(os.Getenv)
	if err != nil {
		t.Fatal(err)
	}
	pg, err := distributed.InitFromInfo(ctx, info, distributed.Options{Transport: transport, Group: distributed.GroupOptions{Timeout: to.Op}})
	if err != nil {
		t.Fatal(err)
	}
	defer pg.Close()
	v, err := train(ctx, pg)
	if err != nil {
		t.Fatalf("rank %d: %v", pg.Rank(), err)
	}
	var buf bytes.Buffer
	if err := gob.NewEncoder(&buf).Encode(v); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(os.Getenv(e.Out), fmt.Sprintf("rank%d.gob", pg.Rank())), buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := pg.Barrier(ctx).Wait(); err != nil {
		t.Fatal(err)
	}
}

// Case is one case of an equivalence test: its subtest name, the number
// of rank processes and the transport they talk over. A test's own case
// type embeds it (and so implements Caser) to add what the case trains.
type Case struct {
	Name      string
	World     int
	Transport string
}

// ProcessCase returns c.
func (c Case) ProcessCase() Case { return c }

// Caser is a test's case type: one that embeds Case.
type Caser interface{ ProcessCase() Case }

// Find returns the case named name, failing t if there is none.
func Find[C Caser](t *testing.T, cases []C, name string) C {
	t.Helper()
	i := slices.IndexFunc(cases, func(c C) bool { return c.ProcessCase().Name == name })
	if i < 0 {
		t.Fatalf("no process case %q", name)
	}
	return cases[i]
}

// Run is the body of the top-level test that runs cases with their
// ranks as processes. In a rank process it runs rank with the case the
// parent chose; in the parent it runs parent for each case as a subtest
// (and skips them all under -short).
func Run[C Caser](t *testing.T, e Env, cases []C, rank, parent func(t *testing.T, c C)) {
	t.Helper()
	if name := e.Child(); name != "" {
		rank(t, Find(t, cases, name))
		return
	}
	if testing.Short() {
		t.Skip("starts rank processes")
	}
	for _, c := range cases {
		t.Run(c.ProcessCase().Name, func(t *testing.T) { parent(t, c) })
	}
}

// Equivalence is the body of the top-level test named test that checks
// cases against one process (Run). A rank process trains its case and
// writes its parameters; the parent launches each case's ranks and fails
// unless every rank's parameters pass compare against want(c) and equal
// rank 0's (replicas never diverge).
func Equivalence[C Caser](t *testing.T, e Env, test string, cases []C,
	train func(ctx context.Context, pg distributed.ProcessGroup, c C) ([][]float32, error),
	want func(t *testing.T, c C) [][]float32, compare func(got, want [][]float32) error) {
	t.Helper()
	Run(t, e, cases, func(t *testing.T, c C) {
		e.Rank(t, c.ProcessCase().Transport, func(ctx context.Context, pg distributed.ProcessGroup) ([][]float32, error) {
			return train(ctx, pg, c)
		})
	}, func(t *testing.T, c C) {
		got := e.Launch(t, test, c.ProcessCase().Name, c.ProcessCase().World)
		w := want(t, c)
		for r := range got {
			if err := compare(got[r], w); err != nil {
				t.Errorf("rank %d vs one process: %v", r, err)
			}
			if r > 0 && !slices.EqualFunc(got[r], got[0], slices.Equal) {
				t.Errorf("rank %d's parameters differ from rank 0's (replicas diverged)", r)
			}
		}
	})
}
