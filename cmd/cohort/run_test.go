package main

import (
	"errors"
	"flag"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cohortml/cohort/launch"
)

func TestParseRunArgs(t *testing.T) {
	slurm := map[string]string{
		"SLURM_PROCID": "1", "SLURM_NTASKS": "2", "SLURM_LOCALID": "0", "SLURM_NODEID": "1", "SLURM_NNODES": "2",
		"SLURM_TASKS_PER_NODE": "1(x2)", "SLURM_JOB_NODELIST": "cn[3-4]", "SLURM_JOB_ID": "5", "COHORT_TOKEN": "tok",
	}
	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		check   func(t *testing.T, rf runFlags)
		wantErr string
	}{
		{
			name: "torchrun-style",
			args: []string{"--nproc-per-node", "2", "--nnodes=2", "--node_rank", "1", "--master-addr", "h0", "--master_port", "29500", "./examples/mnist", "-epochs", "1"},
			check: func(t *testing.T, rf runFlags) {
				c := rf.cfg
				if c.NProcPerNode != 2 || c.NNodes != 2 || c.NodeRank != 1 || c.MasterAddr != "h0" || c.MasterPort != 29500 {
					t.Fatalf("config %+v", c)
				}
				if c.Program != "./examples/mnist" || !slices.Equal(c.Args, []string{"-epochs", "1"}) {
					t.Fatalf("program %q args %q; want the program's flags passed through", c.Program, c.Args)
				}
			},
		},
		{
			name: "observability-and-timeout",
			args: []string{"--timeout", "5s", "--log_dir", "/tmp/logs", "--tee", "--watchdog", "2s", "--dashboard", "127.0.0.1:8080", "prog"},
			check: func(t *testing.T, rf runFlags) {
				c := rf.cfg
				if c.Timeout != 5*time.Second || c.LogDir != "/tmp/logs" || !c.Tee || c.Watchdog != 2*time.Second || c.Dashboard != "127.0.0.1:8080" {
					t.Fatalf("config %+v", c)
				}
			},
		},
		{
			name: "tee-torchrun-streams-watchdog-off",
			args: []string{"--log-dir", "d", "--tee=3", "--watchdog", "off", "prog"},
			check: func(t *testing.T, rf runFlags) {
				if !rf.cfg.Tee || rf.cfg.Watchdog >= 0 {
					t.Fatalf("config %+v; want Tee and the watchdog off", rf.cfg)
				}
			},
		},
		{name: "tee-without-log-dir", args: []string{"--tee", "prog"}, wantErr: "give --log-dir"},
		{name: "bad-watchdog", args: []string{"--watchdog", "soon", "prog"}, wantErr: `--watchdog "soon"`},
		{name: "negative-timeout", args: []string{"--timeout", "-1s", "prog"}, wantErr: "--timeout -1s"},
		{name: "more-workers-than-cpus", args: []string{"--nproc-per-node", "100000", "prog"}, wantErr: "--nproc-per-node 100000: more workers than the"},
		{
			name: "stop-timeout",
			args: []string{"--stop-timeout", "90s", "--nproc-per-node", "100000", "--oversubscribe", "prog"},
			check: func(t *testing.T, rf runFlags) {
				if rf.cfg.GracePeriod != 90*time.Second || rf.cfg.NProcPerNode != 100000 {
					t.Fatalf("config %+v", rf.cfg)
				}
			},
		},
		{
			name: "double-dash",
			args: []string{"--nproc-per-node", "3", "--oversubscribe", "--", "python3", "--nproc-per-node", "x"},
			check: func(t *testing.T, rf runFlags) {
				if rf.cfg.NProcPerNode != 3 || rf.cfg.Program != "python3" || !slices.Equal(rf.cfg.Args, []string{"--nproc-per-node", "x"}) {
					t.Fatalf("config %+v", rf.cfg)
				}
			},
		},
		{
			name: "defaults",
			args: []string{"prog"},
			check: func(t *testing.T, rf runFlags) {
				c := rf.cfg
				if c.NProcPerNode != 1 || c.NNodes != 1 || c.NodeRank != 0 || c.MasterPort != 0 || c.GracePeriod != 30*time.Second || c.Restart != nil {
					t.Fatalf("config %+v", c)
				}
			},
		},
		{
			name: "srun-defaults",
			args: []string{"--nproc-per-node", "4", "--oversubscribe", "prog"},
			env:  slurm,
			check: func(t *testing.T, rf runFlags) {
				c := rf.cfg
				if c.NNodes != 2 || c.NodeRank != 1 || c.MasterAddr != "cn3" || c.MasterPort != 10040 || c.Token != "tok" {
					t.Fatalf("config from Slurm %+v", c)
				}
			},
		},
		{
			name: "flags-override-slurm",
			args: []string{"--nnodes", "1", "--node-rank", "0", "--master-addr", "127.0.0.1", "prog"},
			env:  slurm,
			check: func(t *testing.T, rf runFlags) {
				if c := rf.cfg; c.NNodes != 1 || c.NodeRank != 0 || c.MasterAddr != "127.0.0.1" {
					t.Fatalf("config %+v", c)
				}
			},
		},
		{
			name: "standalone",
			args: []string{"--standalone", "--max-restarts", "2", "prog"},
			env:  map[string]string{"MASTER_ADDR": "h", "MASTER_PORT": "1234"},
			check: func(t *testing.T, rf runFlags) {
				if c := rf.cfg; c.NNodes != 1 || c.MasterPort != 0 || c.MasterAddr != "" || c.Restart == nil {
					t.Fatalf("config %+v", c)
				}
			},
		},
		{name: "no-program", args: []string{"--nproc-per-node", "2"}, wantErr: "no program"},
		{name: "bad-flag", args: []string{"--nproc-per-node", "two", "prog"}, wantErr: "invalid value"},
		{
			name: "elastic",
			args: []string{"--nnodes", "1:4", "--nproc_per_node", "2", "--rdzv_endpoint", "h0:29400", "--rdzv-id", "job7", "--max-restarts", "3",
				"--rdzv-conf", "last_call_timeout=2,keep_alive_interval=1s,keep_alive_max_attempt=4,is_host=false,join_timeout=60", "prog"},
			check: func(t *testing.T, rf runFlags) {
				c := rf.cfg
				want := launch.Elastic{Endpoint: "h0:29400", ID: "job7", MinNodes: 1, MaxNodes: 4, MaxRestarts: 3, Host: launch.HostNo,
					KeepAliveInterval: time.Second, KeepAliveMaxAttempt: 4, LastCallTimeout: 2 * time.Second}
				if c.Elastic != want || c.NNodes != 0 || c.Restart != nil || c.JoinTimeout != time.Minute {
					t.Fatalf("config %+v", c)
				}
			},
		},
		{
			name: "elastic-from-kubeflow",
			args: []string{"prog"},
			env:  map[string]string{"PET_NNODES": "2:3", "PET_RDZV_ENDPOINT": "m:29400", "PET_RDZV_ID": "pj"},
			check: func(t *testing.T, rf runFlags) {
				if e := rf.cfg.Elastic; e.Endpoint != "m:29400" || e.ID != "pj" || e.MinNodes != 2 || e.MaxNodes != 3 {
					t.Fatalf("config %+v", rf.cfg)
				}
			},
		},
		{
			name: "elastic-endpoint-from-master",
			args: []string{"--nnodes", "1:2", "--master-addr", "h", "--master-port", "29500", "prog"},
			check: func(t *testing.T, rf runFlags) {
				if e := rf.cfg.Elastic; e.Endpoint != "h:29500" || rf.cfg.MasterPort != 0 {
					t.Fatalf("config %+v", rf.cfg)
				}
			},
		},
		{name: "elastic-no-endpoint", args: []string{"--nnodes", "1:2", "prog"}, wantErr: "--rdzv-endpoint"},
		{name: "bad-range", args: []string{"--nnodes", "3:2", "prog"}, wantErr: "MIN <= MAX"},
		{name: "bad-nnodes", args: []string{"--nnodes", "x", "prog"}, wantErr: "--nnodes"},
		{name: "range-static", args: []string{"--nnodes", "1:2", "--rdzv-backend", "static", "prog"}, wantErr: "elastic job"},
		{name: "bad-conf", args: []string{"--rdzv-endpoint", "h:1", "--rdzv-conf", "nope=1", "prog"}, wantErr: "unknown key"},
		{name: "bad-env", args: []string{"prog"}, env: map[string]string{"PET_NNODES": "3:1"}, wantErr: "MIN <= MAX"},
		{name: "negative-restarts", args: []string{"--max-restarts", "-1", "prog"}, wantErr: "--max-restarts -1"},
		{name: "dashboard-nonsense", args: []string{"--dashboard", "nonsense", "prog"}, wantErr: `--dashboard "nonsense": want HOST:PORT`},
		{name: "dashboard-bad-port", args: []string{"--dashboard", ":http8080", "prog"}, wantErr: `--dashboard ":http8080"`},
		{name: "dashboard-port-range", args: []string{"--dashboard", "0.0.0.0:70000", "prog"}, wantErr: `--dashboard "0.0.0.0:70000"`},
		{
			name: "dashboard-ok", args: []string{"--dashboard", ":8080", "prog"},
			check: func(t *testing.T, rf runFlags) {
				if rf.cfg.Dashboard != ":8080" {
					t.Fatalf("dashboard %q", rf.cfg.Dashboard)
				}
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rf, err := parseRunArgs(tc.args, func(k string) string { return tc.env[k] }, io.Discard)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("parseRunArgs = %+v, %v; want an error containing %q", rf, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("parseRunArgs: %v", err)
			}
			tc.check(t, rf)
		})
	}
}

func TestParseRunArgsHelp(t *testing.T) {
	var out strings.Builder
	_, err := parseRunArgs([]string{"--help"}, func(string) string { return "" }, &out)
	if !errors.Is(err, flag.ErrHelp) || !strings.Contains(out.String(), "usage: cohort run") || !strings.Contains(out.String(), "-nproc-per-node") {
		t.Fatalf("--help: err %v, output %q", err, out.String())
	}
}

// TestNProcGPU: --nproc-per-node gpu starts one worker per visible GPU (an
// injected count), auto falls back to one without GPUs, and gpu without
// any is an error naming the driver's reason.
func TestNProcGPU(t *testing.T) {
	noDriver := errors.New("cuda: libcuda.so.1 not found (looked in …)")
	for _, tc := range []struct {
		arg     string
		gpus    int
		gpusErr error
		want    int
		err     string
	}{
		{arg: "gpu", gpus: 2, want: 2},
		{arg: "auto", gpus: 2, want: 2},
		{arg: "auto", gpusErr: noDriver, want: 1},
		{arg: "2", gpusErr: noDriver, want: 2},
		{arg: "gpu", gpusErr: noDriver, err: "--nproc-per-node gpu: one worker per visible GPU, but none was found: cuda: libcuda.so.1 not found"},
		{arg: "gpu", gpus: 0, err: "the driver shows none"},
		{arg: "many", err: `invalid value "many" for flag -nproc-per-node: want a number of workers, gpu, cpu or auto`},
	} {
		rf, err := parseRunArgsGPUs([]string{"--oversubscribe", "--nproc-per-node", tc.arg, "prog"}, func(string) string { return "" }, io.Discard,
			func() (int, error) { return tc.gpus, tc.gpusErr })
		switch {
		case tc.err != "":
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("--nproc-per-node %s (gpus %d, %v): %v, want an error containing %q", tc.arg, tc.gpus, tc.gpusErr, err, tc.err)
			}
		case err != nil || rf.cfg.NProcPerNode != tc.want:
			t.Errorf("--nproc-per-node %s (gpus %d, %v): %d workers, %v; want %d", tc.arg, tc.gpus, tc.gpusErr, rf.cfg.NProcPerNode, err, tc.want)
		}
	}
}
