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

// TestLaunchedByMPI: a rank that mpirun or srun started (no RANK) gets
// prefixed lines and plain progress lines, even if its output were a
// terminal; under cohort run (RANK set) the launcher prefixes, and a
// world of one is left alone. COHORT_PROGRESS=bar forces the bar.
func TestLaunchedByMPI(t *testing.T) {
	for _, c := range []struct {
		name   string
		env    map[string]string
		prefix string
		bar    string // "", "yes", "no": Options.Terminal
	}{
		{"openmpi", map[string]string{"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2"}, "[rank 1] ", "no"},
		{"mpich", map[string]string{"PMI_RANK": "3", "PMI_SIZE": "4"}, "[rank 3] ", "no"},
		{"srun", map[string]string{"SLURM_PROCID": "0", "SLURM_NTASKS": "2"}, "[rank 0] ", "no"},
		{"srun, bar forced", map[string]string{"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "COHORT_PROGRESS": "bar"}, "[rank 0] ", "yes"},
		{"mpirun of one", map[string]string{"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "1"}, "", ""},
		{"cohort run inside srun", map[string]string{"RANK": "1", "WORLD_SIZE": "2", "SLURM_PROCID": "0", "SLURM_NTASKS": "2"}, "", ""},
		{"alone", map[string]string{}, "", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := FromEnv(func(k string) string { return c.env[k] }, Options{})
			bar := ""
			if o.Terminal != nil {
				bar = map[bool]string{true: "yes", false: "no"}[*o.Terminal]
			}
			if o.LinePrefix != c.prefix || bar != c.bar {
				t.Errorf("prefix %q, terminal %q; want %q, %q", o.LinePrefix, bar, c.prefix, c.bar)
			}
		})
	}
	// Rank 0 of mpirun -np 2: its lines and its progress lines prefixed,
	// no carriage return even though the output claims to be a terminal
	// only by default (Terminal is left to FromEnv).
	env := map[string]string{"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2"}
	var out bytes.Buffer
	r, err := Start(context.Background(), FromEnv(func(k string) string { return env[k] }, Options{Rank: 0, WorldSize: 2, TotalSteps: 2, Progress: &out, Unit: "tokens"}))
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(r.Out(), "epoch 1: ")
	io.WriteString(r.Out(), "train loss 0.5\nsecond line\n")
	r.Step(Step{Step: 0, Epoch: 1, Loss: 0.5, Samples: 64, Duration: time.Millisecond})
	r.Close()
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	for _, l := range lines {
		if !strings.HasPrefix(l, "[rank 0] ") {
			t.Errorf("line %q lacks the rank prefix", l)
		}
	}
	if strings.Contains(out.String(), "\r") || len(lines) != 4 || lines[0] != "[rank 0] epoch 1: train loss 0.5" || !strings.Contains(lines[2], "tokens/s") {
		t.Errorf("output %q: want 4 prefixed lines, tokens/s, no carriage return", out.String())
	}
}

// TestJobKeysReports: without COHORT_TOKEN the page takes reports only
// with the secret derived from the job's identity: another process that
// posts without it is refused.
func TestJobKeysReports(t *testing.T) {
	o := Options{Name: "t", Rank: 0, WorldSize: 2, Dashboard: "127.0.0.1:0", NoProgress: true, Job: "0123abcd"}
	r0, err := Start(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	defer r0.Close()
	port := r0.Addr()[strings.LastIndex(r0.Addr(), ":")+1:]
	post := func(job string) {
		r, err := Start(context.Background(), Options{Rank: 1, WorldSize: 2, Dashboard: "127.0.0.1:" + port, Job: job})
		if err != nil {
			t.Fatal(err)
		}
		r.Step(Step{Step: 5, Loss: 1, Samples: 1, Duration: time.Millisecond})
		r.Close()
	}
	post("another job")
	if n := len(r0.hub.State().Ranks); n != 0 {
		t.Fatalf("a stranger's report was taken: %d ranks", n)
	}
	post("0123abcd")
	if st := r0.hub.State(); len(st.Ranks) != 1 || st.Ranks[0].Step != 5 {
		t.Errorf("the job's own rank 1 was refused: %+v", st.Ranks)
	}
}

// A StepTimer splits the step's time into data wait, communication and
// the rest, and reports the step even on a nil Run.
func TestStepTimer(t *testing.T) {
	var r *Run
	st := r.StartStep()
	st.Loaded()
	s := st.Done(Step{Step: 3, Loss: 1.5, Comm: time.Nanosecond})
	if s.Step != 3 || s.Loss != 1.5 || s.Duration < s.DataWait || s.Compute != s.Duration-s.DataWait-time.Nanosecond {
		t.Errorf("report %+v: want Duration ≥ DataWait and Compute = Duration − DataWait − Comm", s)
	}
}
