package collbench

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// The end-to-end test runs this test binary as the workers: TestMain
// recognises them by workerEnv and hands their arguments to Main.
const workerEnv = "COHORT_COLLBENCH_TEST_WORKER"

func TestMain(m *testing.M) {
	if op := os.Getenv(workerEnv); op != "" {
		os.Exit(Main(op, nil, os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

func TestParseSizes(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []int64
		err  string
	}{
		{"4KiB,64KiB,1MiB", []int64{4096, 65536, 1 << 20}, ""},
		{"16M, 100", []int64{16 << 20, 100}, ""},
		{"8B", []int64{8}, ""},
		{"3", nil, "not a whole number of float32s"},
		{"-4KiB", nil, "bad size"},
		{"x", nil, "bad size"},
		{",", nil, "no sizes"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseSizes(tc.in)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("ParseSizes(%q) = %v, %v; want error containing %q", tc.in, got, err, tc.err)
				}
				return
			}
			if err != nil || fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Fatalf("ParseSizes(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
			}
		})
	}
}

func TestFormatSize(t *testing.T) {
	for b, want := range map[int64]string{4096: "4KiB", 16 << 20: "16MiB", 1 << 30: "1GiB", 100: "100B", 1536: "1536B"} {
		if got := FormatSize(b); got != want {
			t.Errorf("FormatSize(%d) = %q, want %q", b, got, want)
		}
	}
}

func TestSummary(t *testing.T) {
	cfg := Config{Op: "allreduce", World: 2, Sizes: []int64{4096, 16 << 20}}
	res := []Result{
		{Bytes: 4096, TimeS: 20e-6}, {Bytes: 16 << 20, BusBW: 4.5},
		{Bytes: 4096, TimeS: 30e-6}, {Bytes: 16 << 20, BusBW: 3.5},
		{Bytes: 4096, TimeS: 10e-6}, {Bytes: 16 << 20, BusBW: 5.0},
	}
	want := "allreduce: world 2 4KiB 20.0 us, 16MiB 4.50 GB/s busbw"
	if got := Summary(cfg, res); got != want {
		t.Errorf("Summary = %q, want %q", got, want)
	}
}

func TestBusFactor(t *testing.T) {
	for _, tc := range []struct {
		op   string
		n    int
		want float64
	}{{"allreduce", 2, 1}, {"allreduce", 4, 1.5}, {"allgather", 4, 0.75}, {"reducescatter", 2, 0.5}, {"broadcast", 4, 1}} {
		if got := busFactor(tc.op, tc.n); got != tc.want {
			t.Errorf("busFactor(%s, %d) = %v, want %v", tc.op, tc.n, got, tc.want)
		}
	}
}

func TestMainRejectsBadFlags(t *testing.T) {
	for _, args := range [][]string{{"--world", "0"}, {"--transport", "udp"}, {"--sizes", "3"}, {"extra"}} {
		var out, errb bytes.Buffer
		if code := Main("allreduce", nil, args, &out, &errb); code != 2 {
			t.Errorf("Main(%v) = %d, want 2 (stderr %q)", args, code, errb.String())
		}
	}
	var errb bytes.Buffer
	if code := Main("gather", nil, nil, &bytes.Buffer{}, &errb); code != 2 || !strings.Contains(errb.String(), "unknown collective") {
		t.Errorf("Main(gather) = %d, %q", code, errb.String())
	}
}

// TestNCCLMissingFailsFast: --backend nccl without libnccl fails before
// spawning anything, with one line naming libnccl and where it looked.
func TestNCCLMissingFailsFast(t *testing.T) {
	t.Setenv("COHORT_NCCL_LIBRARY", t.TempDir()+"/libnccl.so.2")
	var out, errb bytes.Buffer
	code := Main("allreduce", []string{"/nonexistent/cohort", "bench", "allreduce"}, []string{"--backend", "nccl", "--world", "1"}, &out, &errb)
	msg := strings.TrimSpace(errb.String())
	if code == 0 || strings.Contains(msg, "\n") || !strings.Contains(msg, "--backend nccl: nccl: libnccl not found (looked in COHORT_NCCL_LIBRARY=") {
		t.Errorf("Main = %d, stderr %q: want a failure in one line naming libnccl", code, msg)
	}
	if code := Main("allreduce", nil, []string{"--backend", "nccl", "--algo", "ring"}, &out, &errb); code != 2 {
		t.Errorf("--backend nccl --algo ring: exit %d, want 2 (NCCL picks its own algorithms)", code)
	}
}

// TestSpawn runs every collective for real: two worker processes over
// each transport, small sizes and a short budget; every result must be
// checked correct and the table and summary well formed.
func TestSpawn(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns processes")
	}
	for _, op := range Ops {
		for _, transport := range []string{"tcp", "shm"} {
			t.Run(op+"/"+transport, func(t *testing.T) {
				t.Setenv(workerEnv, op)
				cfg := Config{Op: op, World: 2, Transport: transport, Sizes: []int64{4096, 1 << 20},
					Budget: 20 * time.Millisecond, Repeats: 1, Timeout: time.Minute}
				res := spawnOK(t, cfg, "")
				var out bytes.Buffer
				PrintTable(&out, cfg, res)
				line := Summary(cfg, res)
				if !strings.HasPrefix(line, op+": world 2 4KiB ") || !strings.HasSuffix(line, " GB/s busbw") {
					t.Errorf("summary %q", line)
				}
				t.Logf("%s%s", out.String(), line)
			})
		}
	}
}

// TestSpawnMPI runs the all-reduce benchmark on the MPI backend, its
// workers started by mpirun.
func TestSpawnMPI(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns processes")
	}
	if _, err := exec.LookPath("mpirun"); err != nil {
		t.Skipf("skipping: no mpirun on PATH (%v)", err)
	}
	t.Setenv(workerEnv, "allreduce")
	cfg := Config{Op: "allreduce", World: 2, Backend: "mpi", Transport: "auto", Sizes: []int64{4096, 1 << 20},
		Budget: 20 * time.Millisecond, Repeats: 1, Timeout: time.Minute}
	spawnOK(t, cfg, "mpi")
}

// spawnOK runs cfg's workers as copies of this test binary and checks
// that every result is a checked, timed run of at least 10 iterations at
// world 2 (over transport, unless it is "").
func spawnOK(t *testing.T, cfg Config, transport string) []Result {
	t.Helper()
	var stderr bytes.Buffer
	res, err := Spawn(context.Background(), cfg, []string{os.Args[0]}, &stderr)
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	for _, r := range res {
		if !r.OK || r.Iters < 10 || r.TimeS <= 0 || r.World != 2 || (transport != "" && r.Transport != transport) {
			t.Errorf("bad result %+v", r)
		}
	}
	return res
}

func TestReadSaved(t *testing.T) {
	in := `{"op":"allreduce","bytes":4096,"world":2,"transport":"tcp","time_s":1e-4,"min_s":5e-5,"ok":true}
[rank 0] result {"op":"allreduce","bytes":65536,"world":2,"transport":"tcp","time_s":2e-4,"ok":true}
result {"op":"broadcast","bytes":4096,"world":2,"transport":"tcp","time_s":3e-5,"ok":true}
[rank 0] cohort run: some other line
# cohort bench allreduce: world 2
`
	got, err := ReadSaved(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 {
		t.Fatalf("read %d results, want 3: %+v", len(got), got)
	}
	if got[0].MinS != 5e-5 || got[1].Bytes != 65536 || got[2].Op != "broadcast" {
		t.Errorf("results %+v", got)
	}
	for _, bad := range []string{`{"op":"allreduce","bytes":4096`, `{"op":"allreduce","bytes":0,"world":2,"time_s":1}`} {
		if _, err := ReadSaved(strings.NewReader(bad)); err == nil {
			t.Errorf("ReadSaved(%q) succeeded, want an error naming the line", bad)
		} else if !strings.Contains(err.Error(), "line 1") {
			t.Errorf("ReadSaved(%q): %v, want it to name line 1", bad, err)
		}
	}
}
