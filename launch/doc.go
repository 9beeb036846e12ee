// Package launch is cohort's agent: it starts a job's worker processes on
// one node, gives them torchrun's environment, streams their output and
// supervises them. `cohort run` is a thin front end to Run.
//
//	cohort run --nproc-per-node N [--nnodes M --node-rank R --master-addr A --master-port P] [--] PROGRAM|GO-PACKAGE ARGS…
//	cohort run --nproc-per-node N --nnodes MIN:MAX --rdzv-endpoint HOST:PORT [--] PROGRAM ARGS…   (elastic)
//
// # Program
//
// PROGRAM is an executable (a path, or a name found in PATH) or a Go
// package: a directory holding .go files ("./examples/mnist", ".") or a
// package path ("github.com/cohortml/cohort/examples/mnist"). A package is built once with
// `go build -o` into a temporary directory, removed when the job ends, and
// the binary is started N times.
//
// # Environment
//
// Worker r of node R (local rank l, rank = R·N + l) gets the variables
// torchrun sets — RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE,
// GROUP_RANK (and NODE_RANK), GROUP_WORLD_SIZE, ROLE_RANK,
// ROLE_WORLD_SIZE, MASTER_ADDR, MASTER_PORT — plus:
//
//	COHORT_STORE_ADDR     the store served by node 0's launcher (= MASTER_ADDR:MASTER_PORT)
//	COHORT_TOKEN          the store's shared secret (random per job on one node)
//	COHORT_RUN_ID         the job's id (random unless given; the same on every node)
//	COHORT_RESTART_COUNT  0, then 1, 2, … after restarts
//	COHORT_NUM_THREADS    max(1, cores / N); OMP_NUM_THREADS too unless already set
//	COHORT_RENDEZVOUS     "torchrun", so these variables win over inherited Slurm/MPI ones
//	TORCHELASTIC_ERROR_FILE  where the worker records why it failed (rendezvous.Fail)
//	COHORT_TIMEOUT        Config.Timeout (--timeout): bounds joining and every collective
//	COHORT_WATCHDOG       Config.Watchdog (--watchdog): the hang watchdog's interval, or off
//	COHORT_DASHBOARD      Config.Dashboard (--dashboard): where rank 0 serves the run page
//
// The last three are set only when given; otherwise an inherited value
// stands.
//
// The rest of the environment is inherited. rendezvous.FromEnv reads all
// of this on the worker side.
//
// # CPUs
//
// With more than one worker on a node, and no more workers than CPUs the
// launcher may run on, each worker is bound to its own contiguous block
// of those CPUs (Config.CPUBind, --cpu-bind auto, the default; none
// turns it off, and so does COHORT_CPU_BIND=none for programs that call
// Run with the zero setting), as mpirun binds ranks to cores by default.
// The launcher forks each worker from a thread narrowed to the worker's
// CPUs for the moment of the fork, since a child inherits its forking
// thread's mask. Unbound, the kernel kept moving two busy workers'
// threads onto one CPU: on a 2-core Intel Xeon (family 6 model 207), two
// workers bound one to each core trained 15–27 % more MLP samples/s, 13 %
// more LeNet and 4 % more GPT-mini tokens/s (DDP over shm, medians of 3
// alternated runs); all-reduces over shm or tcp alone moved within the
// host's noise. A node with more workers than CPUs is left to the kernel.
//
// GOMAXPROCS: a bound worker gets the launcher's GOMAXPROCS (what it would
// have had unbound, every core) unless the environment sets it, and an
// unbound one Go's default. Its kernels use COHORT_NUM_THREADS threads;
// the spare Ps let its communication goroutines run while its compute
// goroutine is busy. Measured on 2 cores with 2 workers (DDP training
// through the shared-memory transport, the default on one host),
// GOMAXPROCS = cores / workers was 25–40 % slower; over TCP it was faster
// (by about 25 % for LeNet, 10 % for the 1.9M-parameter MLP). Set
// GOMAXPROCS in the launcher's environment to override it for every
// worker. The workers of a host exchange their CPU masks when they
// connect (package distributed), so ranks bound to one CPU each still count as
// fitting the host and poll for messages instead of yielding.
//
// # The store
//
// Node 0's launcher serves the job's store (tcpstore, authenticated with
// COHORT_TOKEN) at MASTER_ADDR:MASTER_PORT, as torchrun's agent does, and
// tells the workers with COHORT_STORE_ADDR, so rank 0 dials it like every
// other rank instead of serving its own. On a single node the store
// listens on 127.0.0.1 (or --master-addr) and --master-port 0 (the
// default) picks a free port; with several nodes it listens on every
// interface at --master-port. Programs that open their own server on
// MASTER_PORT (PyTorch's TCPStore, for example) therefore cannot run
// under cohort run; cohort programs use rendezvous.Connect.
//
// The launchers of a multi-node job coordinate through the same store:
// each claims its node rank (two launchers with one --node-rank are an
// error), all check they run the same --nproc-per-node, the first
// failure anywhere is published so every node stops its workers (a
// worker's stop after a signal, exit 130 or 143, is published as a stop:
// the other nodes' workers are stopping after the same step and saving,
// so their launchers wait for them, within the grace period, instead of
// signalling them), and an
// exit barrier keeps node 0's store up until every node is done (bounded
// by Config.ExitBarrierTimeout). Multi-node jobs need COHORT_TOKEN set to
// the same secret on every node.
//
// # Supervision
//
// Each worker runs in its own process group. Its stdout and stderr are
// streamed line by line to the launcher's stdout and stderr (kept apart),
// each line prefixed "[rank N] "; with Config.LogDir (--log-dir) they go
// to LogDir/RUN_ID/attempt_K/RANK/stdout.log and stderr.log instead, or
// to both with Tee (--tee), as torchrun's --log-dir, --redirects and
// --tee do. When a worker exits non-zero or is killed by a signal, the
// other workers get SIGTERM, then SIGKILL after the grace period, and Run
// returns a *WorkerError naming the rank, how it ended, what it recorded
// in its error file (TORCHELASTIC_ERROR_FILE, torchrun's JSON; see
// rendezvous.Fail) and the last lines of its stderr.
//
// The rank named is the one whose failure began first, not the first
// exit seen: a worker stopped by a signal from outside records when the
// signal came (rendezvous.Fail, SignalContext, or distributed.InitFromEnv for a
// signal.NotifyContext context), so SIGTERM to rank 1 names rank 1 and
// SIGTERM even when rank 0, aborted by rank 1's leaving, exits first; the
// report lists the other failures after it. An exit code 128+N reads as
// "stopped by signal N". A signal to the launcher itself (Ctrl-C) stops
// the job as a *SignalError and blames no rank. Signals given to
// the launcher (Config.Signals; cohort run passes SIGINT and SIGTERM) are
// forwarded to every worker; a second signal kills them. They are obeyed
// at every moment: during the build, the join and the workers' start (no
// further worker is started). Workers that stop gracefully
// (distributed.Stopper: finish the step, save, exit 128+N) get
// Config.GracePeriod, 30 s by default as Kubernetes'
// terminationGracePeriodSeconds, before SIGKILL; the *SignalError lists
// how each ended and what it recorded in its error file ("stopped by
// SIGTERM after step 37; checkpoint saved in DIR"). A worker that stopped
// itself after a signal sent to it alone (exit 130 or 143) is a failure
// too, but its peers are stopping after the same step and saving: they get
// the grace period before SIGTERM (a second signal would stop them at once
// and could cut their save short), then another before SIGKILL. Before Run
// returns every worker's process group is killed, so no process the
// workers started is left behind; on Linux the workers also get SIGKILL
// if the launcher itself dies (parent-death signal). A worker's first
// stderr line that states its own error (a panic's message, a flag error
// before a long usage text) is kept as WorkerError.Cause and reported
// before the tail of its stderr.
//
// The launcher's temporary directories (a built program, the error files)
// name their launcher's PID and PID namespace; a launcher killed with
// SIGKILL cannot remove them, and the next Run on the machine does.
//
// The supervision logic is a small state machine without I/O (monitor.go)
// with a restart-policy hook: Config.Restart may restart the workers of a
// single node after a failure (each generation gets a fresh store and
// COHORT_RESTART_COUNT+1); the restart message names the rank and how it
// ended.
//
// A Go package that is not a main package is refused ("not a main
// package") after its build.
//
// # Elastic jobs
//
//	cohort run --nnodes MIN:MAX --nproc-per-node N --rdzv-endpoint HOST:PORT [--rdzv-id ID] [--max-restarts K] PROG
//
// (Config.Elastic; PET_NNODES=MIN:MAX with PET_RDZV_ENDPOINT as a
// PyTorchJob sets them works too.) The agent on HOST serves the
// rendezvous store at PORT (Elastic.Host decides: by default the agent
// whose machine has HOST's address, falling back to dialing when the port
// is taken); every agent dials it. The agents meet in rounds (elastic.go,
// a pure state machine over one compare-and-swapped document, tested as
// transcripts in testdata/elastic):
//
//   - a round closes when MAX nodes joined, or when every node it expects
//     (the last round's survivors and the waiting nodes) joined with at
//     least MIN, or MIN joined and the last call (30 s) ran out; node
//     ranks follow the expected order, so they stay stable;
//   - a worker failure stops every node's workers and opens the next
//     round; the failure counts as a restart (COHORT_RESTART_COUNT and
//     TORCHELASTIC_RESTART_COUNT + 1, at most --max-restarts) only when
//     that round closes with every node of the failed one: when a node
//     was lost on the way, the failures were its symptom;
//   - a node leaving (its agent gets SIGTERM/SIGINT, or its context
//     ends), dying (no heartbeat: agents beat every 5 s, a node silent
//     for 15 s is dead, and one silent for 6 s while a round waits for it
//     is left out) or joining (it waits, and opens the next round at
//     once) starts a new round at the new world size; this is never
//     counted as a restart;
//   - once any node's workers all exited 0 the job is finishing: no new
//     round opens, and the serving agent waits for every other node to
//     leave before it stops serving.
//
// Each round's workers get RANK, WORLD_SIZE, … for that round, MASTER_ADDR
// and MASTER_PORT = the endpoint, COHORT_STORE_ADDR = the endpoint,
// COHORT_STORE_PREFIX (rendezvous.Connect gives them a view of the store
// in which no earlier round's key exists), COHORT_ROUND and
// COHORT_RUN_ID = TORCHELASTIC_RUN_ID = the rdzv id. They resume from
// their own checkpoints. Measured on this machine (2 cores): a killed
// node's survivors train again at the smaller world 2–6 s after the kill
// with the default heartbeats (tests/multihost elastic, launch
// TestElasticProcessKill); a joining node trains within a second. The
// agent that serves the store must stay: when it goes the job ends.
//
// # Clusters
//
//   - torchrun users: `cohort run` takes the same core flags
//     (--nproc-per-node, --nnodes, --node-rank, --master-addr,
//     --master-port; underscores accepted) and sets the same variables.
//   - Slurm: `srun --ntasks-per-node=1 cohort run --nproc-per-node N PROG`
//     runs one launcher per node; cohort run takes --nnodes, --node-rank,
//     --master-addr (first host of the step's node list) and --master-port
//     (derived from the job id) from Slurm's variables
//     (rendezvous.NodeFromEnv). Node names that are in no DNS (node0)
//     are replaced by Slurm's NodeAddr (scontrol show node), and a host
//     that cannot be found fails within seconds, naming it. A program
//     started directly by
//     `srun --ntasks-per-node=N PROG` needs no launcher at all:
//     rendezvous.FromEnv maps SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID
//     and the node list onto the same contract.
//   - OpenMPI: `mpirun -np N -x MASTER_ADDR -x MASTER_PORT PROG` likewise
//     needs no launcher (OMPI_COMM_WORLD_* are read by FromEnv).
//   - Kubernetes: `cohort k8s` writes a PyTorchJob, an Indexed Job with
//     its headless Service, and a JobSet for an image and a command. A
//     Kubeflow PyTorchJob's pods either run the program
//     directly (it sets RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT) or run
//     cohort run, which reads PET_NNODES, PET_NODE_RANK, PET_MASTER_ADDR
//     and PET_MASTER_PORT; an Indexed Job's JOB_COMPLETION_INDEX serves as
//     the rank (program run directly) or the node rank (cohort run).
//
// launch depends on the rendezvous and store packages only, never on
// tensors or process groups.
package launch
