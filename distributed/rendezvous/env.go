package rendezvous

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"
)

// ErrEnv is wrapped by every error about the environment: a variable
// missing, malformed or contradicting another.
var ErrEnv = errors.New("rendezvous: bad environment")

// Source names the launcher contract the values came from.
type Source string

const (
	// Single: no launcher; one process, rank 0 of 1.
	Single Source = "single"
	// Torchrun: RANK, WORLD_SIZE, … as set by torchrun, cohort run and
	// Kubeflow's PyTorchJob.
	Torchrun Source = "torchrun"
	// Slurm: srun's SLURM_PROCID, SLURM_NTASKS, … .
	Slurm Source = "slurm"
	// OpenMPI: mpirun's OMPI_COMM_WORLD_* .
	OpenMPI Source = "openmpi"
	// IndexedJob: a Kubernetes Indexed Job's JOB_COMPLETION_INDEX.
	IndexedJob Source = "indexed-job"
)

var sources = []Source{Single, Torchrun, Slurm, OpenMPI, IndexedJob}

// Info is one process's place in the job.
type Info struct {
	// Source is the contract Rank and WorldSize were read from.
	Source Source
	// Rank is this process's rank, 0 <= Rank < WorldSize.
	Rank int
	// WorldSize is the number of processes in the job, >= 1.
	WorldSize int
	// LocalRank is the rank among the processes on this node,
	// 0 <= LocalRank < LocalWorldSize.
	LocalRank int
	// LocalWorldSize is the number of processes on this node.
	LocalWorldSize int
	// NodeRank is this node's index, or -1 when the launcher does not say
	// (OpenMPI).
	NodeRank int
	// NumNodes is the number of nodes, or 0 when unknown.
	NumNodes int
	// MasterAddr and MasterPort locate rank 0, where the store is served
	// unless StoreAddr is set. Empty/0 only for a single process.
	MasterAddr string
	MasterPort int
	// StoreAddr ("host:port", from COHORT_STORE_ADDR) is a store already
	// served by a launcher; when set no rank serves one and every rank,
	// rank 0 included, dials it.
	StoreAddr string
	// StorePrefix (COHORT_STORE_PREFIX) namespaces every key this
	// process uses in the store at StoreAddr: an elastic launcher gives
	// each round its own, so a round never sees an earlier one's keys.
	StorePrefix string
	// Token is the store's shared secret (COHORT_TOKEN); may be empty.
	Token string
	// RunID names the job (COHORT_RUN_ID, else TORCHELASTIC_RUN_ID).
	RunID string
	// RestartCount is how many times the launcher restarted the workers
	// (COHORT_RESTART_COUNT, else TORCHELASTIC_RESTART_COUNT); 0 at first.
	RestartCount int
	// NumThreads is the compute threads this process should use
	// (COHORT_NUM_THREADS); 0 when not set.
	NumThreads int
	// Timeout (COHORT_TIMEOUT, a Go duration such as 5m) bounds joining
	// the job and every collective op; 0 when not set (the process
	// group's default applies).
	Timeout time.Duration
	// ErrorFile (TORCHELASTIC_ERROR_FILE) is where this worker records
	// why it failed, for its launcher (see WriteErrorFile, Fail); "" when
	// no launcher asked for one.
	ErrorFile string
}

// String formats Info for logs.
func (in Info) String() string {
	return fmt.Sprintf("rank %d of %d (local %d of %d, node %d of %d, from %s)",
		in.Rank, in.WorldSize, in.LocalRank, in.LocalWorldSize, in.NodeRank, in.NumNodes, in.Source)
}

// env wraps getenv: an empty value counts as unset, as in shells.
type env func(string) string

func (e env) has(name string) bool { return e(name) != "" }

// first returns the first of names that is set, and its value.
func (e env) first(names ...string) (string, string) {
	for _, n := range names {
		if v := e(n); v != "" {
			return n, v
		}
	}
	return "", ""
}

func envErr(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrEnv}, args...)...)
}

// intVar parses name as an int >= min. ok is false when unset.
func (e env) intVar(name string, min int) (n int, ok bool, err error) {
	v := e(name)
	if v == "" {
		return 0, false, nil
	}
	n, err = strconv.Atoi(strings.TrimSpace(v))
	if err != nil {
		return 0, true, envErr("%s=%q is not an integer", name, v)
	}
	if n < min {
		return 0, true, envErr("%s=%d: want >= %d", name, n, min)
	}
	return n, true, nil
}

// need parses a required int variable; what explains who should set it.
func (e env) need(name string, min int, what string) (int, error) {
	n, ok, err := e.intVar(name, min)
	if err != nil {
		return 0, err
	}
	if !ok {
		return 0, envErr("%s is not set: %s", name, what)
	}
	return n, nil
}

// vars reads a contract's int variables one a line, keeping the first
// error: every read after it returns zero, and the caller checks err once
// (so a contract reports the first bad variable, as it reads them).
type vars struct {
	e   env
	err error
}

// opt returns intVar's n and ok.
func (v *vars) opt(name string, min int) (int, bool) {
	if v.err != nil {
		return 0, false
	}
	n, ok, err := v.e.intVar(name, min)
	v.err = err
	return n, ok
}

// need returns env.need's n.
func (v *vars) need(name string, min int, what string) int {
	if v.err != nil {
		return 0
	}
	n, err := v.e.need(name, min, what)
	v.err = err
	return n
}

// FromEnv reads this process's place in the job from the environment,
// through getenv (os.Getenv in programs, a map in tests). It is the one
// place the distributed environment contract is read.
//
// Precedence, first match wins:
//
//  1. COHORT_RENDEZVOUS=single|torchrun|slurm|openmpi|indexed-job forces
//     a contract (for example "single" inside a Slurm allocation).
//  2. RANK set: torchrun's contract (also cohort run's and Kubeflow
//     PyTorchJob's): RANK and WORLD_SIZE required; LOCAL_RANK and
//     LOCAL_WORLD_SIZE together or not at all (default 0 and 1, one
//     process per node); GROUP_RANK (or NODE_RANK) for the node, else
//     RANK / LOCAL_WORLD_SIZE; GROUP_WORLD_SIZE for the node count.
//  3. OMPI_COMM_WORLD_RANK set: OpenMPI (…_RANK, _SIZE, _LOCAL_RANK,
//     _LOCAL_SIZE). MASTER_ADDR defaults to 127.0.0.1 when all ranks share
//     one node; MASTER_PORT must be passed (mpirun -x MASTER_PORT=…).
//  4. SLURM_PROCID set: Slurm (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID,
//     SLURM_NODEID and the tasks-per-node list). MASTER_ADDR defaults to
//     the first host of the step's node list; MASTER_PORT to 10000 +
//     (8·SLURM_JOB_ID + SLURM_STEP_ID) mod 20000, so concurrent jobs on a
//     node rarely collide and no port in Linux's ephemeral range is used.
//  5. JOB_COMPLETION_INDEX set: a Kubernetes Indexed Job, one process per
//     pod; WORLD_SIZE (the Job's completions), MASTER_ADDR (e.g. the
//     index-0 pod's DNS name) and MASTER_PORT must be set.
//  6. Otherwise a single process (rank 0 of 1); a lone WORLD_SIZE or
//     LOCAL_RANK without RANK is an error rather than a silent world of 1.
//
// Launcher variables rank below those of the program's own launch, so
// `srun cohort run …` workers follow cohort run's RANK, not srun's.
// MASTER_ADDR and MASTER_PORT, when set, override any default above.
// Every source also reads COHORT_TOKEN, COHORT_STORE_ADDR,
// COHORT_STORE_PREFIX, COHORT_RUN_ID, COHORT_RESTART_COUNT,
// COHORT_NUM_THREADS, COHORT_TIMEOUT and TORCHELASTIC_ERROR_FILE.
//
// A missing, malformed or contradictory variable is an error wrapping
// ErrEnv that names the variable and what was expected.
func FromEnv(getenv func(string) string) (Info, error) {
	e := env(getenv)
	src, err := e.source()
	if err != nil {
		return Info{}, err
	}
	var in Info
	switch src {
	case Single:
		in = Info{Rank: 0, WorldSize: 1, LocalRank: 0, LocalWorldSize: 1, NodeRank: 0, NumNodes: 1}
	case Torchrun:
		in, err = e.torchrun()
	case OpenMPI:
		in, err = e.openMPI()
	case Slurm:
		in, err = e.slurm()
	case IndexedJob:
		in, err = e.indexedJob()
	}
	if err != nil {
		return Info{}, err
	}
	in.Source = src
	if err := e.common(&in); err != nil {
		return Info{}, err
	}
	if err := in.check(); err != nil {
		return Info{}, err
	}
	return in, nil
}

func (e env) source() (Source, error) {
	if v := e("COHORT_RENDEZVOUS"); v != "" {
		for _, s := range sources {
			if Source(v) == s {
				return s, nil
			}
		}
		names := make([]string, len(sources))
		for i, s := range sources {
			names[i] = string(s)
		}
		return "", envErr("COHORT_RENDEZVOUS=%q: want one of %s", v, strings.Join(names, ", "))
	}
	switch {
	case e.has("RANK"):
		return Torchrun, nil
	case e.has("OMPI_COMM_WORLD_RANK"):
		return OpenMPI, nil
	case e.has("SLURM_PROCID"):
		return Slurm, nil
	case e.has("JOB_COMPLETION_INDEX"):
		return IndexedJob, nil
	}
	for _, name := range []string{"WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK"} {
		if v := e(name); v != "" {
			return "", envErr("%s=%s is set but RANK is not: a launcher sets both (torchrun, cohort run), or unset %s to run a single process", name, v, name)
		}
	}
	return Single, nil
}

func (e env) torchrun() (Info, error) {
	const who = "torchrun, cohort run and Kubeflow set it for every worker"
	var in Info
	v := vars{e: e}
	in.Rank = v.need("RANK", 0, who)
	in.WorldSize = v.need("WORLD_SIZE", 1, fmt.Sprintf("RANK=%d is set, so WORLD_SIZE must be too (%s)", in.Rank, who))
	lr, hasLR := v.opt("LOCAL_RANK", 0)
	lws, hasLWS := v.opt("LOCAL_WORLD_SIZE", 1)
	if v.err != nil {
		return in, v.err
	}
	switch {
	case hasLR && !hasLWS:
		return in, envErr("LOCAL_RANK=%d is set but LOCAL_WORLD_SIZE is not: set both or neither", lr)
	case !hasLR && hasLWS:
		return in, envErr("LOCAL_WORLD_SIZE=%d is set but LOCAL_RANK is not: set both or neither", lws)
	case !hasLR:
		lr, lws = 0, 1
	}
	in.LocalRank, in.LocalWorldSize = lr, lws

	gr, hasGR := v.opt("GROUP_RANK", 0)
	nr, hasNR := v.opt("NODE_RANK", 0)
	if v.err != nil {
		return in, v.err
	}
	switch {
	case hasGR && hasNR && gr != nr:
		return in, envErr("GROUP_RANK=%d but NODE_RANK=%d: both name this node, they must agree", gr, nr)
	case hasGR:
		in.NodeRank = gr
	case hasNR:
		in.NodeRank = nr
	default:
		in.NodeRank = in.Rank / in.LocalWorldSize
	}
	if n, ok, err := e.intVar("GROUP_WORLD_SIZE", 1); err != nil {
		return in, err
	} else if ok {
		in.NumNodes = n
	} else if in.WorldSize%in.LocalWorldSize == 0 {
		in.NumNodes = in.WorldSize / in.LocalWorldSize
	}
	return in, nil
}

func (e env) openMPI() (Info, error) {
	const who = "mpirun sets it for every process"
	v := vars{e: e}
	in := Info{
		Rank:           v.need("OMPI_COMM_WORLD_RANK", 0, who),
		WorldSize:      v.need("OMPI_COMM_WORLD_SIZE", 1, who),
		LocalRank:      v.need("OMPI_COMM_WORLD_LOCAL_RANK", 0, who),
		LocalWorldSize: v.need("OMPI_COMM_WORLD_LOCAL_SIZE", 1, who),
	}
	if v.err != nil {
		return in, v.err
	}
	in.NodeRank, in.NumNodes = -1, 0
	if in.LocalWorldSize == in.WorldSize {
		in.NodeRank, in.NumNodes = 0, 1
		in.MasterAddr = "127.0.0.1"
	}
	return in, nil
}

func (e env) slurm() (Info, error) {
	const who = "srun sets it for every task"
	var in Info
	v := vars{e: e}
	if in.Rank = v.need("SLURM_PROCID", 0, who); v.err != nil {
		return in, v.err
	}
	name, _ := e.first("SLURM_STEP_NUM_TASKS", "SLURM_NTASKS", "SLURM_NPROCS")
	if name == "" {
		return in, envErr("SLURM_PROCID=%d is set but SLURM_NTASKS is not: %s", in.Rank, who)
	}
	in.WorldSize = v.need(name, 1, who)
	in.LocalRank = v.need("SLURM_LOCALID", 0, who)
	in.NodeRank = v.need("SLURM_NODEID", 0, who)
	if v.err != nil {
		return in, v.err
	}
	if name, _ := e.first("SLURM_STEP_NUM_NODES", "SLURM_NNODES", "SLURM_JOB_NUM_NODES"); name != "" {
		if in.NumNodes = v.need(name, 1, who); v.err != nil {
			return in, v.err
		}
		if in.NodeRank >= in.NumNodes {
			return in, envErr("SLURM_NODEID=%d but %s=%d: the node id must be < the node count", in.NodeRank, name, in.NumNodes)
		}
	}
	// Tasks on this node: the per-node list is exact (the last node may
	// have fewer); --ntasks-per-node is the fallback.
	if name, list := e.first("SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"); name != "" {
		counts, err := ExpandTasksPerNode(list)
		if err != nil {
			return in, fmt.Errorf("%w: %s: %w", ErrEnv, name, err)
		}
		if in.NodeRank >= len(counts) {
			return in, envErr("SLURM_NODEID=%d but %s=%q lists only %d nodes", in.NodeRank, name, list, len(counts))
		}
		in.LocalWorldSize = counts[in.NodeRank]
	} else if in.LocalWorldSize = v.need("SLURM_NTASKS_PER_NODE", 1, "srun sets SLURM_STEP_TASKS_PER_NODE or SLURM_TASKS_PER_NODE; one of them is needed for the local world size"); v.err != nil {
		return in, v.err
	}
	if name, list := e.first("SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"); name != "" {
		host, err := FirstNode(list)
		if err != nil {
			return in, fmt.Errorf("%w: %s: %w", ErrEnv, name, err)
		}
		in.MasterAddr = host
	}
	if job, ok, err := e.intVar("SLURM_JOB_ID", 0); err != nil {
		return in, err
	} else if ok {
		step, _, err := e.intVar("SLURM_STEP_ID", 0)
		if err != nil {
			step = 0 // "batch"/"extern" steps have symbolic ids
		}
		in.MasterPort = SlurmPort(job, step)
	}
	return in, nil
}

// SlurmPort is the default MASTER_PORT for a Slurm job step:
// 10000 + (8·jobID + stepID) mod 20000.
func SlurmPort(jobID, stepID int) int {
	return 10000 + (8*jobID+stepID)%20000
}

func (e env) indexedJob() (Info, error) {
	var in Info
	v := vars{e: e}
	in.Rank = v.need("JOB_COMPLETION_INDEX", 0, "Kubernetes sets it in Indexed Job pods")
	in.WorldSize = v.need("WORLD_SIZE", 1, fmt.Sprintf("JOB_COMPLETION_INDEX=%d is set (an Indexed Job), so WORLD_SIZE must be set to the Job's completions", in.Rank))
	if v.err != nil {
		return in, v.err
	}
	in.LocalRank, in.LocalWorldSize = 0, 1
	in.NodeRank, in.NumNodes = in.Rank, in.WorldSize
	return in, nil
}

// common reads the variables every source shares.
func (e env) common(in *Info) error {
	if v := e("MASTER_ADDR"); v != "" {
		in.MasterAddr = strings.TrimSpace(v)
	}
	if p, ok, err := e.intVar("MASTER_PORT", 1); err != nil {
		return err
	} else if ok {
		if p > 65535 {
			return envErr("MASTER_PORT=%d: want a TCP port, 1..65535", p)
		}
		in.MasterPort = p
	}
	if v := e("COHORT_STORE_ADDR"); v != "" {
		host, port, err := net.SplitHostPort(v)
		if err != nil || host == "" {
			return envErr("COHORT_STORE_ADDR=%q: want host:port", v)
		}
		if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
			return envErr("COHORT_STORE_ADDR=%q: port %q is not a TCP port", v, port)
		}
		in.StoreAddr = v
	}
	if v := e("COHORT_STORE_PREFIX"); v != "" {
		if !validPrefix(v) {
			return envErr("COHORT_STORE_PREFIX=%q: a key prefix cannot hold NUL or newline", v)
		}
		in.StorePrefix = v
	}
	in.Token = e("COHORT_TOKEN")
	_, in.RunID = e.first("COHORT_RUN_ID", "TORCHELASTIC_RUN_ID")
	if name, _ := e.first("COHORT_RESTART_COUNT", "TORCHELASTIC_RESTART_COUNT"); name != "" {
		n, _, err := e.intVar(name, 0)
		if err != nil {
			return err
		}
		in.RestartCount = n
	}
	if n, _, err := e.intVar("COHORT_NUM_THREADS", 1); err != nil {
		return err
	} else {
		in.NumThreads = n
	}
	if v := strings.TrimSpace(e("COHORT_TIMEOUT")); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return envErr("COHORT_TIMEOUT=%q: want a positive Go duration such as 90s or 10m", v)
		}
		in.Timeout = d
	}
	in.ErrorFile = errorFilePath(e)
	return nil
}

// errorFilePath is where a worker records its failure: torchrun's
// TORCHELASTIC_ERROR_FILE, which cohort run sets too.
func errorFilePath(getenv func(string) string) string {
	return strings.TrimSpace(getenv("TORCHELASTIC_ERROR_FILE"))
}

// check enforces the invariants between the fields, naming the variables
// of the source they came from.
func (in Info) check() error {
	names := map[Source][4]string{
		Single:     {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"},
		Torchrun:   {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"},
		OpenMPI:    {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"},
		Slurm:      {"SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "tasks on this node"},
		IndexedJob: {"JOB_COMPLETION_INDEX", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"},
	}[in.Source]
	rank, world, local, localWorld := names[0], names[1], names[2], names[3]
	switch {
	case in.Rank >= in.WorldSize:
		return envErr("%s=%d but %s=%d: rank must be < world size", rank, in.Rank, world, in.WorldSize)
	case in.LocalRank >= in.LocalWorldSize:
		return envErr("%s=%d but %s=%d: local rank must be < local world size", local, in.LocalRank, localWorld, in.LocalWorldSize)
	case in.LocalWorldSize > in.WorldSize:
		return envErr("%s=%d but %s=%d: a node cannot hold more processes than the job", localWorld, in.LocalWorldSize, world, in.WorldSize)
	case in.LocalRank > in.Rank:
		return envErr("%s=%d but %s=%d: local rank cannot exceed rank", local, in.LocalRank, rank, in.Rank)
	case in.NumNodes > 0 && in.NodeRank >= in.NumNodes:
		return envErr("node rank %d but %d nodes: node rank must be < node count", in.NodeRank, in.NumNodes)
	}
	if in.WorldSize > 1 && in.StoreAddr == "" {
		if in.MasterAddr == "" {
			return envErr("MASTER_ADDR is not set: %s of %d needs the address of rank 0's host (%s)", rank, in.WorldSize, masterHint(in.Source))
		}
		if in.MasterPort == 0 {
			return envErr("MASTER_PORT is not set: %s of %d needs the port rank 0 serves the store on (%s)", rank, in.WorldSize, masterHint(in.Source))
		}
	}
	return nil
}

func masterHint(s Source) string {
	switch s {
	case OpenMPI:
		return "pass it with mpirun -x MASTER_ADDR=host -x MASTER_PORT=port"
	case Slurm:
		return "set it in the batch script, or let the node list and SLURM_JOB_ID provide defaults"
	case IndexedJob:
		return "set it in the pod template, e.g. to the index-0 pod's DNS name and a fixed port"
	}
	return "a launcher such as cohort run or torchrun sets it"
}
