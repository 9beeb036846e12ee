package obs

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cohortml/cohort/obs/trace"
)

// TestRunTwoRanks: rank 0 serves the page, rank 1 posts to it, both trace.
func TestRunTwoRanks(t *testing.T) {
	dir := t.TempDir()
	env := map[string]string{"WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "COHORT_TRACE": dir,
		"COHORT_DASHBOARD": "127.0.0.1:0", "COHORT_TOKEN": "tok"}
	var out bytes.Buffer
	o0 := FromEnv(func(k string) string { return env[k] }, Options{Name: "test", TotalSteps: 10, Progress: &out})
	r0, err := Start(context.Background(), o0)
	if err != nil {
		t.Fatal(err)
	}
	env["RANK"], env["COHORT_DASHBOARD"] = "1", ":"+r0.Addr()[strings.LastIndex(r0.Addr(), ":")+1:]
	r1, err := Start(context.Background(), FromEnv(func(k string) string { return env[k] }, Options{}))
	if err != nil {
		t.Fatal(err)
	}
	for step := range 10 {
		for _, r := range []*Run{r0, r1} {
			sp := r.Tracer().Begin(trace.Compute, "forward")
			sp.End()
			r.Step(Step{Step: step, Loss: 1, Samples: 32, Duration: time.Millisecond, Compute: 800 * time.Microsecond, Comm: 100 * time.Microsecond})
		}
	}
	r0.Note("a note")
	if err := r1.Close(); err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get("http://" + r0.Addr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), `cohort_steps_total{rank="1"} 10`) {
		t.Errorf("rank 1's steps did not reach rank 0's metrics")
	}
	if err := r0.Close(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "step 10/10") {
		t.Errorf("progress output %q lacks the last step", out.String())
	}
	for _, rank := range []string{"0", "1"} {
		b, err := os.ReadFile(filepath.Join(dir, "rank-"+rank+".json"))
		if err != nil {
			t.Fatal(err)
		}
		ev, err := trace.Read(bytes.NewReader(b), rank)
		if err == nil {
			err = trace.Validate(ev)
		}
		if err != nil {
			t.Errorf("rank %s: %v", rank, err)
		}
	}
}

func TestNilRun(t *testing.T) {
	var r *Run
	r.Step(Step{})
	r.Note("x")
	r.Tracer().Begin(trace.Comm, "x").End()
	if err := r.Close(); err != nil || r.Addr() != "" {
		t.Error("nil Run misbehaved")
	}
}
