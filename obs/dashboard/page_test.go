package dashboard

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/cohortml/cohort/obs/dashboard/dashboardtest"
)

// TestPageInChromium serves the page while a fake run of 2 ranks steps,
// loads it in headless Chromium, checks that the DOM holds both ranks and
// a non-empty loss curve, and saves a screenshot in the test's temp dir
// (COHORT_SCREENSHOT=path copies it there too).
func TestPageInChromium(t *testing.T) {
	bin := dashboardtest.Chromium()
	if bin == "" {
		t.Skip("no chromium binary found (Debian: apt-get install chromium); page test skipped")
	}
	h, srv := serveHub(t, "fake 2-rank run", 2, "")
	feed(h, 2, 0, 20)
	h.Note("distributed: watchdog: rank 0: allreduce #21 is stuck: rank 1 never entered it (its last: broadcast #20)")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { // the run keeps stepping while the page loads; owned by the test
		defer close(done)
		for step := 20; ; step++ {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
				feed(h, 2, step, step+1)
			}
		}
	}()
	defer func() { close(stop); <-done }()

	p, err := dashboardtest.Load(ctx, t, bin, "http://"+srv.Addr()+"/", 1200*time.Millisecond, "runpage.png") // one more poll: the curve grows
	if err != nil {
		t.Fatalf("chromium: %v", err)
	}
	if strings.Join(p.Ranks, ",") != "0,1" {
		t.Errorf("rank rows %v, want [0 1]", p.Ranks)
	}
	if n := len(strings.Fields(p.PointsAfter)); n < 20 {
		t.Errorf("loss curve has %d points, want ≥ 20: %q", n, p.PointsAfter)
	}
	t.Logf("screenshot %s (%d bytes); %d loss points", p.Shot, p.ShotBytes, len(strings.Fields(p.PointsAfter)))
}
