package main

import (
	"context"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/cohortml/cohort/datasets"
	"github.com/cohortml/cohort/launch"
	"github.com/cohortml/cohort/obs/dashboard/dashboardtest"
)

// TestRunPageInChromium starts a 2-rank MNIST job as real processes with
// COHORT_DASHBOARD set, loads rank 0's run page in headless Chromium while
// the job trains, checks that the page shows both ranks and a growing loss
// curve, saves a screenshot in the test's temp dir (COHORT_SCREENSHOT=path
// copies it there too), and then stops the job. It runs with
// COHORT_LONG_TESTS=1 and skips without a Chromium binary.
func TestRunPageInChromium(t *testing.T) {
	cfg := config{model: "mlp", epochs: 50, batch: 32, lr: 0.05, seed: 3, limit: 640}
	if os.Getenv(workerEnv) != "" {
		if err := run(context.Background(), cfg, os.Stdout); err != nil {
			t.Fatal(err)
		}
		return
	}
	if testing.Short() || os.Getenv("COHORT_LONG_TESTS") == "" {
		t.Skip("set COHORT_LONG_TESTS=1 to start two processes that load MNIST, and Chromium (obs/dashboard's page test covers the page)")
	}
	bin := dashboardtest.Chromium()
	if bin == "" {
		t.Skip("no chromium binary found (Debian: apt-get install chromium)")
	}
	if _, _, err := datasets.LoadMNIST(""); err != nil {
		t.Skipf("MNIST not available: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0") // a free port for the page
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	jobCtx, stopJob := context.WithCancel(ctx)
	jobDone := make(chan error, 1)
	var out strings.Builder
	go func() { // owned by the test: it waits for jobDone below
		jobDone <- launch.Run(jobCtx, launch.Config{
			NProcPerNode: 2,
			Program:      os.Args[0],
			Args:         []string{"-test.run=^TestRunPageInChromium$", "-test.timeout=2m"},
			Env:          append(os.Environ(), workerEnv+"=1", "COHORT_DASHBOARD="+addr, "COHORT_PROGRESS=off"),
			Stdout:       &out,
			Stderr:       &out,
		})
	}()
	defer func() {
		stopJob()
		<-jobDone
	}()

	// Rank 0 serves the page once it has loaded MNIST: retry until then.
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			break
		}
		select {
		case err := <-jobDone:
			jobDone <- err
			t.Fatalf("the job ended before serving its page: %v\n%s", err, out.String())
		case <-ctx.Done():
			t.Fatalf("no page at %s: %v", addr, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
	p, err := dashboardtest.Load(ctx, t, bin, "http://"+addr+"/", 2500*time.Millisecond, "mnist-runpage.png") // two more polls while the job trains
	if err != nil {
		t.Fatalf("chromium: %v\njob output:\n%s", err, out.String())
	}
	if strings.Join(p.Ranks, ",") != "0,1" {
		t.Errorf("rank rows %v, want [0 1]", p.Ranks)
	}
	nb, na := len(strings.Fields(p.PointsBefore)), len(strings.Fields(p.PointsAfter))
	if na < 2 || na <= nb {
		t.Errorf("loss curve had %d points, then %d: want a curve that grows while the job trains", nb, na)
	}
	t.Logf("screenshot %s (%d bytes); loss curve %d → %d points", p.Shot, p.ShotBytes, nb, na)
}
