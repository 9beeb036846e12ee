package dashboard

import (
	"bytes"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"
)

// feed records steps for world ranks: loss falling, rank 1 slower on comm.
func feed(h interface{ Record(Report) }, world, from, to int) {
	for step := from; step < to; step++ {
		for r := range world {
			h.Record(Report{Rank: r, Step: step, Epoch: step / 10, Loss: Float(2.3 / float64(step+1)), Samples: 64,
				Seconds: 0.010, Compute: 0.006, Comm: Float(0.001 + 0.002*float64(r)), DataWait: 0.001, Bytes: 1 << 20})
		}
	}
}

// serveHub serves a new Hub on a free loopback port until the test ends.
func serveHub(t *testing.T, name string, world int, token string) (*Hub, *Server) {
	t.Helper()
	h := NewHub(name, world, token)
	srv, err := Serve("127.0.0.1:0", h)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	return h, srv
}

func TestHubServesStateAndMetrics(t *testing.T) {
	h, srv := serveHub(t, "mnist", 2, "secret")
	feed(h, 1, 0, 5) // rank 0 locally
	c := NewClient(srv.Addr(), "secret")
	for step := range 5 {
		c.Record(Report{Rank: 1, Step: step, Loss: 1, Samples: 64, Seconds: 0.01, Comm: 0.004})
	}
	c.Close()
	h.Restart()
	h.Note("distributed: watchdog: rank 0: allreduce #3 is stuck")
	st := h.State()
	if len(st.Ranks) != 2 || st.Ranks[1].Step != 4 || len(st.Curve) != 5 || st.Restarts != 1 || len(st.Notes) != 1 {
		t.Errorf("state = %+v; want 2 ranks (rank 1 at step 4), 5 curve points, 1 restart, 1 note", st)
	}
	_, body := get(t, "http://"+srv.Addr()+"/metrics")
	for _, want := range []string{`cohort_steps_total{rank="1"} 5`, `cohort_samples_total{rank="0"} 320`, "cohort_loss ",
		`cohort_step_seconds_bucket{rank="0",le=`, `cohort_allreduce_bytes_total{rank="0"} 5.24288e+06`, "cohort_restarts_total 1",
		`cohort_step_phase_seconds_total{phase="comm",rank="1"}`} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	// Reports without the token are refused.
	bad := NewClient(srv.Addr(), "wrong")
	bad.Record(Report{Rank: 5, Step: 1})
	bad.Close()
	if len(h.State().Ranks) != 2 {
		t.Error("a report with the wrong token was accepted")
	}
}

func TestCurveIsBounded(t *testing.T) {
	h := NewHub("", 1, "")
	feed(h, 1, 0, 3*maxPoints)
	c := h.State().Curve
	if len(c) >= maxPoints || len(c) < maxPoints/4 {
		t.Errorf("%d curve points after %d steps, want in [%d, %d)", len(c), 3*maxPoints, maxPoints/4, maxPoints)
	}
	if c[len(c)-1].Step < 3*maxPoints-8 {
		t.Errorf("last point at step %d: the curve stopped following the run", c[len(c)-1].Step)
	}
}

// get fetches url and returns its status and body.
func get(t *testing.T, url string) (int, []byte) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}

// TestNonFinite: a diverging run (loss NaN, then +Inf) still serves its
// state, page and metrics, and other ranks' NaN reports still arrive.
func TestNonFinite(t *testing.T) {
	h, srv := serveHub(t, "diverging", 2, "")
	h.Record(Report{Rank: 0, Step: 0, Loss: 2.3, Samples: 64, Seconds: 0.01})
	h.Record(Report{Rank: 0, Step: 1, Loss: Float(math.NaN()), Samples: 64, Seconds: 0.01, Compute: Float(math.NaN())})
	h.Record(Report{Rank: 0, Step: 2, Loss: Float(math.Inf(1)), Samples: 64, Seconds: 0.01})
	c := NewClient(srv.Addr(), "")
	c.Record(Report{Rank: 1, Step: 2, Loss: Float(math.NaN()), Samples: 64, Seconds: 0.01})
	c.Close()
	if st := h.State(); len(st.Ranks) != 2 || !math.IsNaN(float64(st.Ranks[1].Loss)) {
		t.Fatalf("rank 1's NaN report did not arrive: %+v", st.Ranks)
	}
	code, body := get(t, "http://"+srv.Addr()+"/api/state")
	if code != http.StatusOK || len(body) == 0 {
		t.Fatalf("/api/state: %d with %d bytes", code, len(body))
	}
	var st State
	if err := json.Unmarshal(body, &st); err != nil {
		t.Fatalf("/api/state is not JSON: %v\n%s", err, body)
	}
	if len(st.Curve) != 3 || !math.IsNaN(float64(st.Curve[1].Loss)) || !math.IsInf(float64(st.Curve[2].Loss), 1) || float64(st.Curve[0].Loss) != 2.3 {
		t.Errorf("curve %+v: want 2.3, NaN, +Inf", st.Curve)
	}
	for _, want := range []string{`"loss":"NaN"`, `"loss":"+Inf"`, `"loss":2.3`} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/api/state lacks %s: %s", want, body)
		}
	}
	if code, page := get(t, "http://"+srv.Addr()+"/"); code != http.StatusOK || !strings.Contains(string(page), "function num(") {
		t.Errorf("page: %d, or without its non-finite number reader", code)
	}
	if code, m := get(t, "http://"+srv.Addr()+"/metrics"); code != http.StatusOK || !strings.Contains(string(m), "cohort_loss +Inf") {
		t.Errorf("/metrics: %d\n%s", code, m)
	}
}

// post sends reports to the hub at addr with token and returns the status.
func post(t *testing.T, addr, token string, reports []Report) int {
	t.Helper()
	b, err := json.Marshal(reports)
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest("POST", "http://"+addr+"/api/report", bytes.NewReader(b))
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// TestFakeRanksRefused: posts of ranks outside the world (15,000 fake
// ranks, as an attacker sent) are refused with 400 and leave nothing
// behind; the state stays bounded by the world.
func TestFakeRanksRefused(t *testing.T) {
	h, srv := serveHub(t, "mnist", 2, "")
	start := time.Now()
	for batch := range 15 {
		fake := make([]Report, 1000)
		for i := range fake {
			fake[i] = Report{Rank: 2 + batch*1000 + i, Step: 1, Loss: 1}
		}
		if code := post(t, srv.Addr(), "", fake); code != http.StatusBadRequest {
			t.Fatalf("post of ranks %d..%d: status %d, want 400", fake[0].Rank, fake[len(fake)-1].Rank, code)
		}
	}
	t.Logf("15,000 fake ranks refused in %v", time.Since(start).Round(time.Millisecond))
	for _, bad := range [][]Report{{{Rank: -1}}, {{Rank: 0}}, make([]Report, maxReportsPerPost+1)} {
		if code := post(t, srv.Addr(), "", bad); code != http.StatusBadRequest {
			t.Errorf("post of %d reports (first rank %d): status %d, want 400", len(bad), bad[0].Rank, code)
		}
	}
	if code := post(t, srv.Addr(), "", []Report{{Rank: 1, Step: 3}}); code != http.StatusOK {
		t.Errorf("rank 1's report: status %d", code)
	}
	h.Record(Report{Rank: 7}) // in-process too
	if st := h.State(); len(st.Ranks) != 1 || st.Ranks[0].Rank != 1 {
		t.Errorf("ranks %+v, want rank 1 only", st.Ranks)
	}
	_, m := get(t, "http://"+srv.Addr()+"/metrics")
	if len(m) > 64<<10 || strings.Contains(string(m), `rank="2"`) {
		t.Errorf("/metrics is %d bytes or holds a fake rank", len(m))
	}
	for range 50 {
		h.Note(strings.Repeat("x", 10_000))
	}
	if st := h.State(); len(st.Notes) != maxNotes || len(st.Notes[0]) > maxNoteBytes+20 {
		t.Errorf("%d notes of %d bytes, want %d of at most ~%d", len(st.Notes), len(st.Notes[0]), maxNotes, maxNoteBytes)
	}
}
