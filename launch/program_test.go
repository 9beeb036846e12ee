package launch

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestResolveProgram(t *testing.T) {
	dir := t.TempDir()
	mustWrite := func(name string, mode os.FileMode) {
		p := filepath.Join(dir, name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte("x"), mode); err != nil {
			t.Fatal(err)
		}
	}
	mustWrite("bin/train", 0o755)
	mustWrite("notexec", 0o644)
	mustWrite("pkg/main.go", 0o644)
	mustWrite("onlytests/a_test.go", 0o644)
	mustWrite("nopkg/README", 0o644)
	mustWrite("local/main.go", 0o644)
	lookPath := func(name string) (string, error) {
		if name == "python3" {
			return "/usr/bin/python3", nil
		}
		return "", exec.ErrNotFound
	}
	tests := []struct {
		prog    string
		kind    programKind
		path    string // exact, or a suffix for absolute paths
		wantErr string
	}{
		{prog: "./bin/train", kind: kindExecutable, path: filepath.Join(dir, "bin/train")},
		{prog: "bin/train", kind: kindExecutable, path: filepath.Join(dir, "bin/train")},
		{prog: filepath.Join(dir, "bin/train"), kind: kindExecutable, path: filepath.Join(dir, "bin/train")},
		{prog: "python3", kind: kindExecutable, path: "/usr/bin/python3"},
		{prog: "./pkg", kind: kindPackage, path: "./pkg"},
		{prog: "pkg/", kind: kindPackage, path: "./pkg"},
		{prog: "local", kind: kindPackage, path: "./local"},
		{prog: "github.com/cohortml/cohort/examples/mnist", kind: kindPackage, path: "github.com/cohortml/cohort/examples/mnist"},
		{prog: "example.com/x/cmd/y", kind: kindPackage, path: "example.com/x/cmd/y"},
		{prog: "./notexec", wantErr: "not executable"},
		{prog: "./onlytests", wantErr: "without .go files"},
		{prog: "./nopkg", wantErr: "without .go files"},
		{prog: "./missing", wantErr: "no such file"},
		{prog: "nosuchcmd", wantErr: "not in PATH"},
		{prog: "", wantErr: "no program"},
	}
	for _, tc := range tests {
		t.Run(strings.ReplaceAll(tc.prog, "/", "|"), func(t *testing.T) {
			got, err := resolveProgram(tc.prog, dir, lookPath)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("resolveProgram(%q) = %+v, %v; want an error containing %q", tc.prog, got, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("resolveProgram(%q): %v", tc.prog, err)
			}
			if got.kind != tc.kind || got.path != tc.path {
				t.Fatalf("resolveProgram(%q) = kind %d path %q; want kind %d path %q", tc.prog, got.kind, got.path, tc.kind, tc.path)
			}
		})
	}
}

func TestWorkerEnv(t *testing.T) {
	a := &agent{cfg: Config{
		NProcPerNode: 4, NNodes: 2, NodeRank: 1, MasterAddr: "node0",
		Env:     []string{"PATH=/bin", "RANK=7", "OMP_NUM_THREADS=3", "COHORT_RENDEZVOUS=openmpi", "WEIRD", "COHORT_TIMEOUT=1h"},
		Timeout: 90 * time.Second, Watchdog: 2 * time.Second, Dashboard: "127.0.0.1:8080",
	}, port: 29500, storeAddr: "node0:29500", token: "tok", runID: "run"}
	env := a.workerEnv(2, a.staticGeneration(1), 2, "/logs/run/attempt_1/6/error.json")
	get := func(k string) []string {
		var vs []string
		for _, e := range env {
			if key, v, ok := strings.Cut(e, "="); ok && key == k {
				vs = append(vs, v)
			}
		}
		return vs
	}
	want := map[string]string{
		"PATH": "/bin", "RANK": "6", "LOCAL_RANK": "2", "WORLD_SIZE": "8", "LOCAL_WORLD_SIZE": "4",
		"GROUP_RANK": "1", "NODE_RANK": "1", "GROUP_WORLD_SIZE": "2", "ROLE_RANK": "6", "ROLE_WORLD_SIZE": "8",
		"MASTER_ADDR": "node0", "MASTER_PORT": "29500", "COHORT_STORE_ADDR": "node0:29500",
		"COHORT_TOKEN": "tok", "COHORT_RUN_ID": "run", "COHORT_RESTART_COUNT": "1",
		"COHORT_NUM_THREADS": "2", "OMP_NUM_THREADS": "3", "COHORT_RENDEZVOUS": "torchrun",
		"TORCHELASTIC_RUN_ID": "run", "TORCHELASTIC_RESTART_COUNT": "1",
		"TORCHELASTIC_ERROR_FILE": "/logs/run/attempt_1/6/error.json",
		"COHORT_TIMEOUT":          "1m30s", "COHORT_WATCHDOG": "2s", "COHORT_DASHBOARD": "127.0.0.1:8080",
	}
	for k, w := range want {
		if vs := get(k); len(vs) != 1 || vs[0] != w {
			t.Errorf("%s = %q; want exactly one %q", k, vs, w)
		}
	}
	for _, k := range []string{"COHORT_STORE_PREFIX", "COHORT_ROUND"} {
		if vs := get(k); len(vs) != 0 {
			t.Errorf("%s = %q in a fixed-size job; want it unset", k, vs)
		}
	}
}

// TestWorkerEnvWatchdogOff: a negative Config.Watchdog turns the
// workers' watchdog off; unset options leave inherited values alone.
func TestWorkerEnvWatchdogOff(t *testing.T) {
	a := &agent{cfg: Config{NProcPerNode: 1, Watchdog: -1, Env: []string{"COHORT_TIMEOUT=7s", "COHORT_DASHBOARD=:9"}}}
	env := strings.Join(a.workerEnv(0, a.staticGeneration(0), 1, "e.json"), "\n") + "\n"
	for _, want := range []string{"COHORT_WATCHDOG=off\n", "COHORT_TIMEOUT=7s\n", "COHORT_DASHBOARD=:9\n"} {
		if !strings.Contains(env, want) {
			t.Errorf("environment lacks %q:\n%s", want, env)
		}
	}
}

// TestWorkerEnvElastic: an elastic round's workers get its store prefix
// and round, and an inherited prefix is replaced.
func TestWorkerEnvElastic(t *testing.T) {
	a := &agent{cfg: Config{NProcPerNode: 2, Env: []string{"COHORT_STORE_PREFIX=old/", "COHORT_ROUND=9"}}, token: "tok", runID: "job"}
	g := generation{nodeRank: 1, numNodes: 2, rankBase: 2, world: 4, nproc: 2, restarts: 1, masterAddr: "10.0.0.1",
		masterPort: 29400, storeAddr: "10.0.0.1:29400", storePrefix: "cohort/elastic/job/round/3/", round: 3}
	env := strings.Join(a.workerEnv(1, g, 1, "e.json"), "\n") + "\n"
	for _, want := range []string{"RANK=3\n", "WORLD_SIZE=4\n", "GROUP_RANK=1\n", "COHORT_STORE_PREFIX=cohort/elastic/job/round/3/\n",
		"COHORT_ROUND=3\n", "COHORT_RESTART_COUNT=1\n", "TORCHELASTIC_RESTART_COUNT=1\n", "TORCHELASTIC_RUN_ID=job\n"} {
		if !strings.Contains(env, want) {
			t.Errorf("environment lacks %q:\n%s", want, env)
		}
	}
	if strings.Contains(env, "old/") || strings.Contains(env, "COHORT_ROUND=9") {
		t.Errorf("inherited COHORT_STORE_PREFIX or COHORT_ROUND kept:\n%s", env)
	}
}
