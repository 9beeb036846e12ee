package mpi_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/cohortml/cohort/distributed"
	"github.com/cohortml/cohort/distributed/backend/mpi"
	"github.com/cohortml/cohort/distributed/grouptest"
	libmpi "github.com/cohortml/cohort/distributed/internal/mpi"
)

// underMPI reports whether this process was started by mpirun for one of
// the tests below.
func underMPI() bool { return os.Getenv("COHORT_MPI_TEST") != "" }

// mpirun returns the mpirun command, or skips t saying what is missing.
func mpirun(t *testing.T) string {
	t.Helper()
	if _, err := libmpi.Load(); errors.Is(err, libmpi.ErrUnavailable) {
		t.Skipf("skipping: no MPI library (%v)", err)
	}
	path, err := exec.LookPath("mpirun")
	if err != nil {
		t.Skipf("skipping: no mpirun on PATH (%v)", err)
	}
	return path
}

// runUnderMPI runs this test binary's test named test under mpirun with
// np processes, and fails t with the output if any process fails.
func runUnderMPI(t *testing.T, np int, test string, timeout time.Duration, env ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	env = append(env, "COHORT_MPI_TEST=1")
	args := []string{"--allow-run-as-root", "--oversubscribe", "-np", fmt.Sprint(np)}
	for _, kv := range env {
		args = append(args, "-x", kv)
	}
	args = append(args, os.Args[0], "-test.run=^"+test+"$", "-test.count=1")
	cmd := exec.CommandContext(ctx, mpirun(t), args...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil || ctx.Err() != nil {
		t.Fatalf("mpirun -np %d %s: %v (%v)\n%s", np, test, err, ctx.Err(), out)
	}
	if !strings.Contains(string(out), "PASS") {
		t.Fatalf("mpirun -np %d %s: no PASS in the output:\n%s", np, test, out)
	}
	t.Logf("mpirun -np %d %s: passed on every rank", np, test)
}

// TestMPIConformance runs the conformance suite on the MPI backend: from
// go test it starts itself under mpirun with 2 and 4 processes (and with 2
// where every MPI call goes through the MPI goroutine, as with a library
// that lacks MPI_THREAD_MULTIPLE), and under mpirun each process runs the
// suite as one rank of MPI's world.
func TestMPIConformance(t *testing.T) {
	if !underMPI() {
		for _, c := range []struct {
			np  int
			env []string
		}{{2, nil}, {4, nil}, {2, []string{"COHORT_MPI_FUNNELED=1"}}} {
			t.Run(strings.Join(append([]string{fmt.Sprintf("np=%d", c.np)}, c.env...), ","), func(t *testing.T) {
				runUnderMPI(t, c.np, "TestMPIConformance", 4*time.Minute, c.env...)
			})
		}
		return
	}
	pg, err := distributed.Init(context.Background(), distributed.Options{Backend: "mpi"})
	if err != nil {
		t.Fatal(err)
	}
	if info, ok := mpi.Info(pg); ok && pg.Rank() == 0 {
		t.Logf("rank 0 of %d: %s", pg.Size(), info)
	}
	grouptest.Test(t, func(t *testing.T, world int, fn func(*testing.T, distributed.ProcessGroup)) {
		fn(t, pg)
	}, grouptest.Config{Worlds: []int{pg.Size()}})
	if err := pg.Close(); err != nil {
		t.Error(err)
	}
	if _, err := distributed.Init(context.Background(), distributed.Options{Backend: "mpi"}); err == nil || !strings.Contains(err.Error(), "finalised") {
		t.Errorf("Init after MPI_Finalize: %v, want an error saying MPI is finalised", err)
	}
}

// TestMPIPeerDeath documents what a dead peer does under mpirun: rank 1
// exits in the middle of the job while rank 0 waits in an all-reduce for
// it, and mpirun ends the whole job (exiting non-zero) rather than leave
// rank 0 waiting.
func TestMPIPeerDeath(t *testing.T) {
	if !underMPI() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, mpirun(t), "--allow-run-as-root", "--oversubscribe", "-np", "2",
			"-x", "COHORT_MPI_TEST=1", os.Args[0], "-test.run=^TestMPIPeerDeath$", "-test.count=1")
		cmd.Env = append(os.Environ(), "COHORT_MPI_TEST=1")
		out, err := cmd.CombinedOutput()
		if ctx.Err() != nil {
			t.Fatalf("mpirun did not end the job after rank 1 died:\n%s", out)
		}
		if err == nil {
			t.Fatalf("mpirun exited 0 although rank 1 died:\n%s", out)
		}
		t.Logf("mpirun ended the job: %v", err)
		return
	}
	ctx := context.Background()
	pg, err := distributed.Init(ctx, distributed.Options{Backend: "mpi"})
	if err != nil {
		t.Fatal(err)
	}
	if err := pg.Barrier(ctx).Wait(); err != nil {
		t.Fatal(err)
	}
	if pg.Rank() == 1 {
		os.Exit(3) // dies without a word to its peer
	}
	err = pg.AllReduce(ctx, distributed.F32(make([]float32, 4)), distributed.Sum).Wait()
	t.Errorf("rank %d: all-reduce with a dead peer returned %v instead of the job ending", pg.Rank(), err)
	pg.Close()
}
