package dist_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"cohort/dist"
	"cohort/dist/grouptest"
	"cohort/dist/internal/mpi"
)

// underMPI reports whether this process was started by mpirun for one of
// the tests below.
func underMPI() bool { return os.Getenv("COHORT_MPI_TEST") != "" }

// mpirun returns the mpirun command, or skips t saying what is missing.
func mpirun(t *testing.T) string {
	t.Helper()
	if _, err := mpi.Load(); errors.Is(err, mpi.ErrUnavailable) {
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
	pg, err := dist.Init(context.Background(), dist.Options{Backend: "mpi"})
	if err != nil {
		t.Fatal(err)
	}
	if info, ok := dist.MPIInfo(pg); ok && pg.Rank() == 0 {
		t.Logf("rank 0 of %d: %s", pg.Size(), info)
	}
	grouptest.Test(t, func(t *testing.T, world int, fn func(*testing.T, dist.ProcessGroup)) {
		fn(t, pg)
	}, grouptest.Config{Worlds: []int{pg.Size()}})
	if err := pg.Close(); err != nil {
		t.Error(err)
	}
	if _, err := dist.Init(context.Background(), dist.Options{Backend: "mpi"}); err == nil || !strings.Contains(err.Error(), "finalised") {
		t.Errorf("Init after MPI_Finalize: %v, want an error saying MPI is finalised", err)
	}
}
