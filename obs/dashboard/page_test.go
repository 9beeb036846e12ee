package dashboard

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// chromium finds a headless-capable browser binary, or "".
func chromium() string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "headless-shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// TestPageInChromium serves the page while a fake run of 2 ranks steps,
// loads it in headless Chromium, checks that the DOM holds both ranks and
// a non-empty loss curve, and saves a screenshot in the test's temp dir
// (COHORT_SCREENSHOT=path copies it there too).
func TestPageInChromium(t *testing.T) {
	bin := chromium()
	if bin == "" {
		t.Skip("no chromium binary found (Debian: apt-get install chromium); page test skipped")
	}
	h := NewHub("fake 2-rank run", 2, "")
	srv, err := Serve("127.0.0.1:0", h)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
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

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(bin), chromedp.NoSandbox,
		chromedp.WindowSize(1100, 800), chromedp.Flag("disable-dev-shm-usage", true))
	actx, acancel := chromedp.NewExecAllocator(ctx, opts...)
	defer acancel()
	bctx, bcancel := chromedp.NewContext(actx)
	defer bcancel()
	var ranks []string
	var points string
	var shot []byte
	err = chromedp.Run(bctx,
		chromedp.Navigate("http://"+srv.Addr()+"/"),
		chromedp.WaitVisible(`tr.rankrow[data-rank="1"]`, chromedp.ByQuery),
		chromedp.WaitVisible(`#losscurve`, chromedp.ByQuery),
		chromedp.Sleep(1200*time.Millisecond), // one more poll: the curve grows
		chromedp.Evaluate(`Array.from(document.querySelectorAll("tr.rankrow")).map(r => r.dataset.rank)`, &ranks),
		chromedp.AttributeValue(`#losscurve`, "points", &points, nil, chromedp.ByQuery),
		chromedp.FullScreenshot(&shot, 100), // 100: PNG,
	)
	if err != nil {
		t.Fatalf("chromium: %v", err)
	}
	if strings.Join(ranks, ",") != "0,1" {
		t.Errorf("rank rows %v, want [0 1]", ranks)
	}
	if n := len(strings.Fields(points)); n < 20 {
		t.Errorf("loss curve has %d points, want ≥ 20: %q", n, points)
	}
	path := filepath.Join(t.TempDir(), "runpage.png")
	if err := os.WriteFile(path, shot, 0o644); err != nil {
		t.Fatal(err)
	}
	if p := os.Getenv("COHORT_SCREENSHOT"); p != "" {
		os.WriteFile(p, shot, 0o644)
	}
	t.Logf("screenshot %s (%d bytes); %d loss points", path, len(shot), len(strings.Fields(points)))
}
