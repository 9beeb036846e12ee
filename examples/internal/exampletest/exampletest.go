// Package exampletest runs an example's test binary as the ranks of a
// job, the way `cohort run` runs the example itself.
package exampletest

import (
	"bytes"
	"context"
	"os"
	"testing"
	"time"

	"github.com/cohortml/cohort/launch"
)

// RunWorkers runs nproc copies of this test binary as the ranks of one
// job (launch.Run, 2 minutes at most), each running only the test
// function test, with env ("K=V") added to this process's environment.
// It logs the workers' output on t and returns their standard output.
func RunWorkers(t *testing.T, test string, nproc int, env ...string) (stdout string, err error) {
	t.Helper()
	var out, errOut bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	err = launch.Run(ctx, launch.Config{
		NProcPerNode: nproc,
		Program:      os.Args[0],
		Args:         []string{"-test.run=^" + test + "$", "-test.timeout=2m"},
		Env:          append(os.Environ(), env...),
		Stdout:       &out,
		Stderr:       &errOut,
	})
	t.Logf("workers' output:\n%s%s", out.String(), errOut.String())
	return out.String(), err
}
