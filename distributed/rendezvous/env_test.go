package rendezvous_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/cohortml/cohort/distributed/rendezvous"
)

func getenv(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func TestFromEnv(t *testing.T) {
	torchrun := map[string]string{
		"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2", "GROUP_RANK": "1",
		"MASTER_ADDR": "node0", "MASTER_PORT": "29500",
	}
	tests := []struct {
		name string
		env  map[string]string
		want rendezvous.Info
	}{
		{
			name: "single/empty",
			env:  nil,
			want: rendezvous.Info{Source: rendezvous.Single, WorldSize: 1, LocalWorldSize: 1, NumNodes: 1},
		},
		{
			name: "single/cohort-vars-only",
			env:  map[string]string{"COHORT_NUM_THREADS": "4", "COHORT_TOKEN": "t"},
			want: rendezvous.Info{Source: rendezvous.Single, WorldSize: 1, LocalWorldSize: 1, NumNodes: 1, NumThreads: 4, Token: "t"},
		},
		{
			name: "torchrun/full",
			env: with(torchrun, map[string]string{
				"COHORT_TOKEN": "secret", "COHORT_RUN_ID": "job7", "COHORT_STORE_ADDR": "node0:29500",
				"COHORT_RESTART_COUNT": "2", "COHORT_NUM_THREADS": "8",
			}),
			want: rendezvous.Info{Source: rendezvous.Torchrun, Rank: 3, WorldSize: 4, LocalRank: 1, LocalWorldSize: 2,
				NodeRank: 1, NumNodes: 2, MasterAddr: "node0", MasterPort: 29500, StoreAddr: "node0:29500",
				Token: "secret", RunID: "job7", RestartCount: 2, NumThreads: 8},
		},
		{
			name: "torchrun/timeout-and-error-file",
			env:  with(torchrun, map[string]string{"COHORT_TIMEOUT": "90s", "TORCHELASTIC_ERROR_FILE": "/tmp/e/error.json"}),
			want: rendezvous.Info{Source: rendezvous.Torchrun, Rank: 3, WorldSize: 4, LocalRank: 1, LocalWorldSize: 2,
				NodeRank: 1, NumNodes: 2, MasterAddr: "node0", MasterPort: 29500, Timeout: 90 * time.Second, ErrorFile: "/tmp/e/error.json"},
		},
		{
			name: "torchrun/node-rank-derived",
			env:  with(torchrun, map[string]string{"GROUP_RANK": ""}),
			want: rendezvous.Info{Source: rendezvous.Torchrun, Rank: 3, WorldSize: 4, LocalRank: 1, LocalWorldSize: 2,
				NodeRank: 1, NumNodes: 2, MasterAddr: "node0", MasterPort: 29500},
		},
		{
			name: "torchrun/torchelastic-names",
			env:  with(torchrun, map[string]string{"TORCHELASTIC_RUN_ID": "te", "TORCHELASTIC_RESTART_COUNT": "1", "GROUP_WORLD_SIZE": "2"}),
			want: rendezvous.Info{Source: rendezvous.Torchrun, Rank: 3, WorldSize: 4, LocalRank: 1, LocalWorldSize: 2,
				NodeRank: 1, NumNodes: 2, MasterAddr: "node0", MasterPort: 29500, RunID: "te", RestartCount: 1},
		},
		{
			name: "kubeflow/pytorchjob-one-process-per-pod",
			env:  map[string]string{"RANK": "2", "WORLD_SIZE": "3", "MASTER_ADDR": "job-master-0", "MASTER_PORT": "23456"},
			want: rendezvous.Info{Source: rendezvous.Torchrun, Rank: 2, WorldSize: 3, LocalRank: 0, LocalWorldSize: 1,
				NodeRank: 2, NumNodes: 3, MasterAddr: "job-master-0", MasterPort: 23456},
		},
		{
			name: "torchrun/world-1-needs-no-master",
			env:  map[string]string{"RANK": "0", "WORLD_SIZE": "1"},
			want: rendezvous.Info{Source: rendezvous.Torchrun, WorldSize: 1, LocalWorldSize: 1, NumNodes: 1},
		},
		{
			name: "torchrun/store-addr-replaces-master",
			env:  map[string]string{"RANK": "1", "WORLD_SIZE": "2", "COHORT_STORE_ADDR": "[::1]:4000"},
			want: rendezvous.Info{Source: rendezvous.Torchrun, Rank: 1, WorldSize: 2, LocalWorldSize: 1, NodeRank: 1, NumNodes: 2, StoreAddr: "[::1]:4000"},
		},
		{
			name: "torchrun/wins-over-slurm",
			env:  with(torchrun, slurmEnv()),
			want: rendezvous.Info{Source: rendezvous.Torchrun, Rank: 3, WorldSize: 4, LocalRank: 1, LocalWorldSize: 2,
				NodeRank: 1, NumNodes: 2, MasterAddr: "node0", MasterPort: 29500},
		},
		{
			name: "slurm/defaults-from-nodelist-and-job-id",
			env:  slurmEnv(),
			want: rendezvous.Info{Source: rendezvous.Slurm, Rank: 5, WorldSize: 7, LocalRank: 1, LocalWorldSize: 2,
				NodeRank: 2, NumNodes: 4, MasterAddr: "gpu01", MasterPort: 10000 + (8*4242+0)%20000},
		},
		{
			name: "slurm/last-node-has-fewer",
			env:  with(slurmEnv(), map[string]string{"SLURM_PROCID": "6", "SLURM_LOCALID": "0", "SLURM_NODEID": "3"}),
			want: rendezvous.Info{Source: rendezvous.Slurm, Rank: 6, WorldSize: 7, LocalRank: 0, LocalWorldSize: 1,
				NodeRank: 3, NumNodes: 4, MasterAddr: "gpu01", MasterPort: 10000 + (8*4242)%20000},
		},
		{
			name: "slurm/ntasks-per-node-and-explicit-master",
			env: map[string]string{"SLURM_PROCID": "1", "SLURM_NTASKS": "4", "SLURM_LOCALID": "1", "SLURM_NODEID": "0",
				"SLURM_NTASKS_PER_NODE": "2", "SLURM_NNODES": "2", "SLURM_JOB_NODELIST": "a,b",
				"SLURM_JOB_ID": "1", "SLURM_STEP_ID": "3", "MASTER_ADDR": "10.1.1.1", "MASTER_PORT": "1234"},
			want: rendezvous.Info{Source: rendezvous.Slurm, Rank: 1, WorldSize: 4, LocalRank: 1, LocalWorldSize: 2,
				NodeRank: 0, NumNodes: 2, MasterAddr: "10.1.1.1", MasterPort: 1234},
		},
		{
			name: "openmpi/single-node-defaults-to-loopback",
			env: map[string]string{"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2",
				"OMPI_COMM_WORLD_LOCAL_RANK": "1", "OMPI_COMM_WORLD_LOCAL_SIZE": "2", "MASTER_PORT": "5000"},
			want: rendezvous.Info{Source: rendezvous.OpenMPI, Rank: 1, WorldSize: 2, LocalRank: 1, LocalWorldSize: 2,
				NodeRank: 0, NumNodes: 1, MasterAddr: "127.0.0.1", MasterPort: 5000},
		},
		{
			name: "openmpi/multi-node",
			env: map[string]string{"OMPI_COMM_WORLD_RANK": "5", "OMPI_COMM_WORLD_SIZE": "8",
				"OMPI_COMM_WORLD_LOCAL_RANK": "1", "OMPI_COMM_WORLD_LOCAL_SIZE": "4", "MASTER_ADDR": "h0", "MASTER_PORT": "5000"},
			want: rendezvous.Info{Source: rendezvous.OpenMPI, Rank: 5, WorldSize: 8, LocalRank: 1, LocalWorldSize: 4,
				NodeRank: -1, MasterAddr: "h0", MasterPort: 5000},
		},
		{
			name: "openmpi/wins-over-slurm",
			env: with(slurmEnv(), map[string]string{"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "1",
				"OMPI_COMM_WORLD_LOCAL_RANK": "0", "OMPI_COMM_WORLD_LOCAL_SIZE": "1"}),
			want: rendezvous.Info{Source: rendezvous.OpenMPI, WorldSize: 1, LocalWorldSize: 1, NumNodes: 1, MasterAddr: "127.0.0.1"},
		},
		{
			name: "indexed-job",
			env:  map[string]string{"JOB_COMPLETION_INDEX": "2", "WORLD_SIZE": "4", "MASTER_ADDR": "train-0.train", "MASTER_PORT": "29500"},
			want: rendezvous.Info{Source: rendezvous.IndexedJob, Rank: 2, WorldSize: 4, LocalWorldSize: 1,
				NodeRank: 2, NumNodes: 4, MasterAddr: "train-0.train", MasterPort: 29500},
		},
		{
			name: "forced-single-inside-slurm",
			env:  with(slurmEnv(), map[string]string{"COHORT_RENDEZVOUS": "single"}),
			want: rendezvous.Info{Source: rendezvous.Single, WorldSize: 1, LocalWorldSize: 1, NumNodes: 1},
		},
	}
	checkParsed(t, "FromEnv", rendezvous.FromEnv, tests)
}

// slurmEnv is task 5 of `srun -N4 -n7 …` on nodes gpu[01-03],gpu07 with
// tasks per node 2,2,2,1.
func slurmEnv() map[string]string {
	return map[string]string{
		"SLURM_PROCID": "5", "SLURM_NTASKS": "7", "SLURM_LOCALID": "1", "SLURM_NODEID": "2",
		"SLURM_NNODES": "4", "SLURM_TASKS_PER_NODE": "2(x3),1", "SLURM_JOB_NODELIST": "gpu[01-03,07]",
		"SLURM_JOB_ID": "4242", "SLURM_STEP_ID": "0",
	}
}

func with(base map[string]string, extra map[string]string) map[string]string {
	m := make(map[string]string, len(base)+len(extra))
	for k, v := range base {
		m[k] = v
	}
	for k, v := range extra {
		m[k] = v
	}
	return m
}

func TestFromEnvErrors(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		want []string // substrings of the message
	}{
		{"rank-beyond-world", map[string]string{"RANK": "3", "WORLD_SIZE": "2", "MASTER_ADDR": "h", "MASTER_PORT": "1"},
			[]string{"RANK=3 but WORLD_SIZE=2: rank must be < world size"}},
		{"rank-without-world", map[string]string{"RANK": "1"}, []string{"WORLD_SIZE is not set", "RANK=1"}},
		{"world-without-rank", map[string]string{"WORLD_SIZE": "4"}, []string{"WORLD_SIZE=4 is set but RANK is not"}},
		{"local-rank-without-rank", map[string]string{"LOCAL_RANK": "0"}, []string{"LOCAL_RANK=0 is set but RANK is not"}},
		{"rank-not-integer", map[string]string{"RANK": "one", "WORLD_SIZE": "2"}, []string{`RANK="one" is not an integer`}},
		{"negative-rank", map[string]string{"RANK": "-1", "WORLD_SIZE": "2"}, []string{"RANK=-1: want >= 0"}},
		{"zero-world", map[string]string{"RANK": "0", "WORLD_SIZE": "0"}, []string{"WORLD_SIZE=0: want >= 1"}},
		{"local-rank-alone", map[string]string{"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "MASTER_ADDR": "h", "MASTER_PORT": "1"},
			[]string{"LOCAL_RANK=0 is set but LOCAL_WORLD_SIZE is not"}},
		{"local-rank-beyond", map[string]string{"RANK": "1", "WORLD_SIZE": "4", "LOCAL_RANK": "2", "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "h", "MASTER_PORT": "1"},
			[]string{"LOCAL_RANK=2 but LOCAL_WORLD_SIZE=2"}},
		{"local-world-beyond-world", map[string]string{"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "4", "MASTER_ADDR": "h", "MASTER_PORT": "1"},
			[]string{"LOCAL_WORLD_SIZE=4 but WORLD_SIZE=2"}},
		{"group-vs-node-rank", with(map[string]string{"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "h", "MASTER_PORT": "1"}, map[string]string{"GROUP_RANK": "0", "NODE_RANK": "1"}),
			[]string{"GROUP_RANK=0 but NODE_RANK=1"}},
		{"missing-master-addr", map[string]string{"RANK": "1", "WORLD_SIZE": "2", "MASTER_PORT": "29500"}, []string{"MASTER_ADDR is not set"}},
		{"missing-master-port", map[string]string{"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "h"}, []string{"MASTER_PORT is not set"}},
		{"port-out-of-range", map[string]string{"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "h", "MASTER_PORT": "70000"}, []string{"MASTER_PORT=70000"}},
		{"bad-store-addr", map[string]string{"COHORT_STORE_ADDR": "nohostport"}, []string{"COHORT_STORE_ADDR", "host:port"}},
		{"bad-num-threads", map[string]string{"COHORT_NUM_THREADS": "0"}, []string{"COHORT_NUM_THREADS=0"}},
		{"bad-timeout", map[string]string{"COHORT_TIMEOUT": "5"}, []string{"COHORT_TIMEOUT=\"5\"", "Go duration"}},
		{"negative-timeout", map[string]string{"COHORT_TIMEOUT": "-1s"}, []string{"COHORT_TIMEOUT=\"-1s\""}},
		{"unknown-forced-source", map[string]string{"COHORT_RENDEZVOUS": "pbs"}, []string{`COHORT_RENDEZVOUS="pbs"`, "slurm"}},
		{"slurm/no-ntasks", map[string]string{"SLURM_PROCID": "0"}, []string{"SLURM_NTASKS is not"}},
		{"slurm/procid-beyond", with(slurmEnv(), map[string]string{"SLURM_PROCID": "7"}), []string{"SLURM_PROCID=7 but SLURM_NTASKS=7"}},
		{"slurm/nodeid-beyond-list", with(slurmEnv(), map[string]string{"SLURM_NNODES": "", "SLURM_NODEID": "4"}), []string{"SLURM_NODEID=4", "lists only 4 nodes"}},
		{"slurm/localid-beyond", with(slurmEnv(), map[string]string{"SLURM_LOCALID": "2"}), []string{"SLURM_LOCALID=2 but tasks on this node=2"}},
		{"slurm/bad-nodelist", with(slurmEnv(), map[string]string{"SLURM_JOB_NODELIST": "gpu[01-"}), []string{"SLURM_JOB_NODELIST", "unclosed"}},
		{"slurm/no-tasks-per-node", map[string]string{"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_LOCALID": "0", "SLURM_NODEID": "0"},
			[]string{"SLURM_NTASKS_PER_NODE is not set"}},
		{"openmpi/multi-node-without-master", map[string]string{"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "4",
			"OMPI_COMM_WORLD_LOCAL_RANK": "0", "OMPI_COMM_WORLD_LOCAL_SIZE": "2"}, []string{"MASTER_ADDR is not set", "mpirun -x"}},
		{"openmpi/no-port", map[string]string{"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2",
			"OMPI_COMM_WORLD_LOCAL_RANK": "0", "OMPI_COMM_WORLD_LOCAL_SIZE": "2"}, []string{"MASTER_PORT is not set", "mpirun -x"}},
		{"indexed-job/no-world", map[string]string{"JOB_COMPLETION_INDEX": "1"}, []string{"WORLD_SIZE is not set", "completions"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := rendezvous.FromEnv(getenv(tc.env))
			if err == nil {
				t.Fatalf("FromEnv = %+v, nil; want an error", got)
			}
			if !errors.Is(err, rendezvous.ErrEnv) {
				t.Errorf("error %q does not wrap ErrEnv", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func TestNodeFromEnv(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		want rendezvous.Node
	}{
		{"nothing", nil, rendezvous.Node{}},
		{"master-only", map[string]string{"MASTER_ADDR": "h", "MASTER_PORT": "29500", "COHORT_TOKEN": "t"},
			rendezvous.Node{MasterAddr: "h", MasterPort: 29500, Token: "t"}},
		{"srun-one-task-per-node", map[string]string{"SLURM_PROCID": "2", "SLURM_NTASKS": "3", "SLURM_LOCALID": "0", "SLURM_NODEID": "2",
			"SLURM_NNODES": "3", "SLURM_TASKS_PER_NODE": "1(x3)", "SLURM_JOB_NODELIST": "cn[7-9]", "SLURM_JOB_ID": "10", "SLURM_STEP_ID": "1"},
			rendezvous.Node{Source: rendezvous.Slurm, NumNodes: 3, NodeRank: 2, MasterAddr: "cn7", MasterPort: 10000 + 81}},
		{"kubeflow", map[string]string{"PET_NNODES": "2", "PET_NODE_RANK": "1", "PET_MASTER_ADDR": "m", "PET_MASTER_PORT": "23456", "MASTER_ADDR": "ignored"},
			rendezvous.Node{Source: rendezvous.Kubeflow, NumNodes: 2, NodeRank: 1, MasterAddr: "m", MasterPort: 23456}},
		{"kubeflow-elastic", map[string]string{"PET_NNODES": "1:4", "PET_RDZV_ENDPOINT": "job-master-0:29400", "PET_RDZV_ID": "job", "PET_MASTER_PORT": "23456"},
			rendezvous.Node{Source: rendezvous.Kubeflow, MinNodes: 1, MaxNodes: 4, RdzvEndpoint: "job-master-0:29400", RdzvID: "job", MasterPort: 23456}},
		{"indexed-job", map[string]string{"JOB_COMPLETION_INDEX": "3", "MASTER_ADDR": "j-0.svc", "MASTER_PORT": "29500", "COHORT_RUN_ID": "r"},
			rendezvous.Node{Source: rendezvous.IndexedJob, NodeRank: 3, MasterAddr: "j-0.svc", MasterPort: 29500, RunID: "r"}},
	}
	checkParsed(t, "NodeFromEnv", rendezvous.NodeFromEnv, tests)
}

func TestNodeFromEnvErrors(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		want string
	}{
		{"srun-several-tasks-per-node", map[string]string{"SLURM_PROCID": "1", "SLURM_NTASKS": "4", "SLURM_LOCALID": "1", "SLURM_NODEID": "0",
			"SLURM_TASKS_PER_NODE": "2(x2)", "SLURM_JOB_NODELIST": "a,b"}, "--ntasks-per-node=1"},
		{"kubeflow-bad-range", map[string]string{"PET_NNODES": "4:1"}, "1 <= MIN <= MAX"},
		{"kubeflow-bad-range-text", map[string]string{"PET_NNODES": "1:x"}, `PET_NNODES="1:x"`},
		{"kubeflow-rank-beyond", map[string]string{"PET_NNODES": "2", "PET_NODE_RANK": "2"}, "node rank 2 but 2 nodes"},
		{"bad-port", map[string]string{"MASTER_PORT": "x"}, `MASTER_PORT="x"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := rendezvous.NodeFromEnv(getenv(tc.env))
			if err == nil {
				t.Fatalf("NodeFromEnv = %+v, nil; want an error", got)
			}
			if !errors.Is(err, rendezvous.ErrEnv) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q should wrap ErrEnv and contain %q", err, tc.want)
			}
		})
	}
}

// checkParsed runs each case as a subtest: parse of its environment
// (what names parse in messages) must succeed and return what it wants.
func checkParsed[T comparable](t *testing.T, what string, parse func(func(string) string) (T, error), tests []struct {
	name string
	env  map[string]string
	want T
}) {
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parse(getenv(tc.env))
			if err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			if got != tc.want {
				t.Fatalf("%s =\n %+v\nwant\n %+v", what, got, tc.want)
			}
		})
	}
}
