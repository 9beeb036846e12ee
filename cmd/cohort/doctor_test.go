package main

import (
	"errors"
	"strings"
	"testing"

	"github.com/cohortml/cohort/internal/extras"
)

// TestDoctorReport: found extras show where, absent ones why, how to get
// them and the tests they skip; the summary counts the skipped tests once.
func TestDoctorReport(t *testing.T) {
	t.Setenv("COHORT_SOAK", "")
	found := []extras.Status{
		{Extra: extras.Extra{Name: "OpenBLAS", Use: "gemm", Install: "apt-get install libopenblas0", Tests: []string{"a.TestX"}}, Where: "libopenblas.so.0"},
		{Extra: extras.Extra{Name: "MPI", Use: "mpi", Install: "apt-get install libopenmpi3", Tests: []string{"b.TestY", "c.TestZ"}}, Err: errors.New("libmpi.so.40: not found")},
		{Extra: extras.Extra{Name: "mpirun", Use: "ranks", Install: "apt-get install openmpi-bin", Tests: []string{"b.TestY"}}, Err: errors.New("mpirun not in PATH")},
	}
	var b strings.Builder
	writeDoctor(&b, found, []extras.Gate{{Var: "COHORT_SOAK=1", What: "soak", Tests: []string{"d.TestKill"}}})
	out := b.String()
	for _, want := range []string{
		"found   OpenBLAS", "libopenblas.so.0",
		"absent  MPI", "libmpi.so.40: not found", "apt-get install libopenmpi3", "skipped: b.TestY, c.TestZ",
		"absent  mpirun", "skipped: b.TestY",
		"off     COHORT_SOAK=1", "soak: d.TestKill",
		"1 of 3 extras found; without the others go test ./... skips the 2 tests",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "a.TestX") {
		t.Errorf("a found extra's tests are listed as skipped:\n%s", out)
	}
}
