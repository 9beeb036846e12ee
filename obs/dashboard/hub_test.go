package dashboard

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// feed records steps for world ranks: loss falling, rank 1 slower on comm.
func feed(h interface{ Record(Report) }, world, from, to int) {
	for step := from; step < to; step++ {
		for r := range world {
			h.Record(Report{Rank: r, Step: step, Epoch: step / 10, Loss: 2.3 / float64(step+1), Samples: 64,
				Seconds: 0.010, Compute: 0.006, Comm: 0.001 + 0.002*float64(r), DataWait: 0.001, Bytes: 1 << 20})
		}
	}
}

func TestHubServesStateAndMetrics(t *testing.T) {
	h := NewHub("mnist", 2, "secret")
	srv, err := Serve("127.0.0.1:0", h)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
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
	resp, err := http.Get("http://" + srv.Addr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
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
