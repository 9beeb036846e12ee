package bench

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cohortml/cohort/plan"
)

// TestPlanFitSaved fits saved results (no benchmark is run): an inter-node
// all-reduce at 1 Gbit/s with α 50 µs, the intra class from --base.
func TestPlanFitSaved(t *testing.T) {
	dir := t.TempDir()
	res := filepath.Join(dir, "inter.jsonl")
	// time = 2·50 µs + bytes/1.25e8 (2 ranks: 2 steps, factor 1)
	lines := `[rank 0] result {"op":"allreduce","bytes":4096,"world":2,"transport":"tcp","time_s":0.000132768,"min_s":0.0001,"ok":true}
[rank 0] result {"op":"allreduce","bytes":1048576,"world":2,"transport":"tcp","time_s":0.008488608,"min_s":0.008,"ok":true}
[rank 0] result {"op":"allreduce","bytes":16777216,"world":2,"transport":"tcp","time_s":0.134317728,"min_s":0.13,"ok":true}
{"op":"allreduce","bytes":4096,"world":2,"transport":"shm","time_s":0.5,"ok":true}
`
	if err := os.WriteFile(res, []byte(lines), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "fabric.json")
	var stdout, stderr bytes.Buffer
	if code := Fit("", []string{"--intra", "", "--inter", "tcp", "--inter-results", res, "--name", "t", "-o", out}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	if !strings.Contains(stderr.String(), "inter tcp allreduce: alpha 50.000 us bandwidth 1.25e+08 B/s") {
		t.Errorf("report:\n%s", stderr.String())
	}
	f, err := plan.LoadFabric(out, os.ReadFile)
	if err != nil {
		t.Fatal(err)
	}
	if *f.Inter.Alpha != 50e-6 || *f.Inter.Bandwidth != 1.25e8 {
		t.Errorf("inter α %g β %g, want 5e-05 1.25e+08", *f.Inter.Alpha, *f.Inter.Bandwidth)
	}
	local, _ := plan.BuiltinFabric("local")
	if *f.Intra.Alpha != *local.Intra.Alpha || *f.Intra.Bandwidth != *local.Intra.Bandwidth {
		t.Errorf("intra %+v, want the base fabric's", f.Intra)
	}

	// A file without the class's transport is an error naming it.
	stderr.Reset()
	if code := Fit("", []string{"--intra", "", "--inter", "ib", "--inter-results", res}, &stdout, &stderr); code != 1 ||
		!strings.Contains(stderr.String(), `of transport "ib"`) {
		t.Errorf("exit %d, stderr %q; want 1 and the transport named", code, stderr.String())
	}
	// --stat checks its value.
	stderr.Reset()
	if code := Fit("", []string{"--stat", "mean", "--inter-results", res}, &stdout, &stderr); code != 1 || !strings.Contains(stderr.String(), "--stat") {
		t.Errorf("exit %d, stderr %q", code, stderr.String())
	}
}
