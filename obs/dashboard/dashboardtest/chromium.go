// Package dashboardtest loads a run page (package dashboard) in headless
// Chromium for the tests of the page and of the programs that serve it.
package dashboardtest

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// Chromium finds a headless-capable browser binary, or "".
func Chromium() string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "headless-shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// Page is what a run page showed.
type Page struct {
	Ranks []string // the rank rows' data-rank, top to bottom
	// The loss curve's points when it first showed, and after the wait.
	PointsBefore, PointsAfter string
	Shot                      string // the full-page screenshot (PNG) in the test's temp dir
	ShotBytes                 int
}

// Load opens url in headless Chromium (bin) within ctx, waits until rank
// 1's row and the loss curve show, waits wait more (the page's polls),
// reads the page and saves a screenshot as name in t's temp dir
// (COHORT_SCREENSHOT=path copies it there too).
func Load(ctx context.Context, t *testing.T, bin, url string, wait time.Duration, name string) (Page, error) {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(bin), chromedp.NoSandbox,
		chromedp.WindowSize(1100, 800), chromedp.Flag("disable-dev-shm-usage", true))
	actx, acancel := chromedp.NewExecAllocator(ctx, opts...)
	defer acancel()
	bctx, bcancel := chromedp.NewContext(actx)
	defer bcancel()
	var p Page
	var shot []byte
	err := chromedp.Run(bctx,
		chromedp.Navigate(url),
		chromedp.WaitVisible(`tr.rankrow[data-rank="1"]`, chromedp.ByQuery),
		chromedp.WaitVisible(`#losscurve`, chromedp.ByQuery),
		chromedp.AttributeValue(`#losscurve`, "points", &p.PointsBefore, nil, chromedp.ByQuery),
		chromedp.Sleep(wait),
		chromedp.Evaluate(`Array.from(document.querySelectorAll("tr.rankrow")).map(r => r.dataset.rank)`, &p.Ranks),
		chromedp.AttributeValue(`#losscurve`, "points", &p.PointsAfter, nil, chromedp.ByQuery),
		chromedp.FullScreenshot(&shot, 100), // 100: PNG
	)
	if err != nil {
		return p, err
	}
	p.Shot, p.ShotBytes = filepath.Join(t.TempDir(), name), len(shot)
	if err := os.WriteFile(p.Shot, shot, 0o644); err != nil {
		return p, err
	}
	if path := os.Getenv("COHORT_SCREENSHOT"); path != "" {
		os.WriteFile(path, shot, 0o644)
	}
	return p, nil
}
