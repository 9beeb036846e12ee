package distributed

import (
	"cmp"
	"context"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/cohortml/cohort/distributed/rendezvous"
	"github.com/cohortml/cohort/distributed/store"
	"github.com/cohortml/cohort/tensor"
)

// A Backend implements ProcessGroup; Register makes it available to Init
// by name. Backends live in packages of their own
// (distributed/backend/native, distributed/backend/mpi) that register
// themselves when imported, as database/sql drivers do; this package
// imports none of them. A program links the ones it wants with a blank
// import, all of them at once with distributed/backend/all.
//
// Besides ProcessGroup, a backend's groups and Works may implement these
// methods, which the functions of the same name in this package call:
//
//	NewGroup(ctx context.Context, ranks []int) (ProcessGroup, error)  // on the group
//	SendsBuffered() bool                                              // on the group
//	Watch(st store.Store, prefix string, opts WatchdogOptions) error  // on the group
//	JobID() string                                                    // on the group
//	Completion() <-chan struct{}                                      // on a Work
type Backend struct {
	// Init joins the job's world group as Init documents; opts.Backend
	// names this backend.
	Init func(ctx context.Context, opts Options) (ProcessGroup, error)
	// OwnRendezvous says the backend learns who is rank what from its own
	// launcher (MPI's mpirun), not from a store: InitFromEnv then reads no
	// rendezvous environment and calls Init with only Backend set.
	OwnRendezvous bool
	// Devices are the device kinds whose tensors the backend's groups
	// take (AllReduceTensor, BroadcastTensor): "cuda" for nccl. Every
	// backend takes host memory. Init picks, for a program whose
	// Options.Device is of one of these kinds and that names no backend,
	// the backend that lists it.
	Devices []string
}

// DefaultBackend is the backend Init uses when Options.Backend is empty.
const DefaultBackend = "native"

var registry struct {
	sync.RWMutex
	m map[string]Backend
}

// Register makes a backend available under name. It is meant to be called
// from the init function of the backend's package, and panics if name is
// empty or taken, or b.Init is nil.
func Register(name string, b Backend) {
	registry.Lock()
	defer registry.Unlock()
	switch {
	case name == "":
		panic("distributed: Register: empty backend name")
	case b.Init == nil:
		panic("distributed: Register: backend " + strconv.Quote(name) + " has no Init")
	case registry.m[name].Init != nil:
		panic("distributed: Register: backend " + strconv.Quote(name) + " registered twice")
	}
	if registry.m == nil {
		registry.m = make(map[string]Backend)
	}
	registry.m[name] = b
}

// Backends returns the names of the registered backends, sorted.
func Backends() []string {
	registry.RLock()
	defer registry.RUnlock()
	names := make([]string, 0, len(registry.m))
	for n := range registry.m {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// lookup returns the backend registered as name ("" is DefaultBackend),
// or an error that names it and says how a backend gets registered.
func lookup(name string) (Backend, error) {
	name = cmp.Or(name, DefaultBackend)
	registry.RLock()
	b, ok := registry.m[name]
	registry.RUnlock()
	if ok {
		return b, nil
	}
	have := "none"
	if names := Backends(); len(names) > 0 {
		have = strings.Join(names, ", ")
	}
	return Backend{}, fmt.Errorf("unknown backend %q (registered: %s; a backend registers itself when its package is linked in: import _ \"github.com/cohortml/cohort/distributed/backend/all\")", name, have)
}

// chooseBackend returns the backend for a program on dev: named (checked
// against dev) or, when name is empty, the one dev's kind needs.
func chooseBackend(name string, dev tensor.Device) (string, error) {
	if dev.IsCPU() {
		return name, nil
	}
	registry.RLock()
	defer registry.RUnlock()
	takes := func(b Backend) bool { return slices.Contains(b.Devices, dev.Kind()) }
	if name != "" {
		if b, ok := registry.m[name]; ok && !takes(b) {
			return "", fmt.Errorf("backend %q takes host memory only, but the program's tensors are on %v (name no backend, and Init picks the one for %s tensors; or train on the CPU)", name, dev, dev.Kind())
		}
		return name, nil // an unknown name is lookup's error
	}
	var names []string
	for n, b := range registry.m {
		if takes(b) {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	if len(names) == 0 {
		have := make([]string, 0, len(registry.m))
		for n := range registry.m {
			have = append(have, n)
		}
		slices.Sort(have)
		return "", fmt.Errorf("no registered backend takes %s tensors, and the program's tensors are on %v (registered: %s; the nccl backend takes CUDA tensors: import _ \"github.com/cohortml/cohort/distributed/backend/all\")", dev.Kind(), dev, strings.Join(have, ", "))
	}
	return names[0], nil
}

// Init joins the job's world group with the backend Options.Backend names
// (DefaultBackend if empty): every rank calls it with the same store and
// world size and its own rank. The native backend claims this rank in
// the store (a second claimant of a rank is refused, and the groups of
// the job abort naming it), publishes where this rank can be reached,
// reads every other rank's address from the store, connects the
// transport and returns the group, which owns the transport. It blocks
// until every rank has arrived, ctx ends or Group.Timeout passes,
// reporting the ranks it still waits for about every 10 s; the error
// names the missing ranks. Each Init needs a Prefix of its own within one
// store.
//
// With Options.Backend empty, the backend follows Options.Device: on the
// CPU DefaultBackend, on a device the registered backend that takes its
// tensors (nccl for CUDA, as PyTorch users name backend="nccl" for GPUs).
// A backend named explicitly wins, but one that cannot take the device's
// tensors is refused, naming both.
func Init(ctx context.Context, opts Options) (ProcessGroup, error) {
	name, err := chooseBackend(opts.Backend, opts.Device)
	if err != nil {
		return nil, fmt.Errorf("distributed: Init: %w", err)
	}
	opts.Backend = name
	b, err := lookup(opts.Backend)
	if err != nil {
		return nil, fmt.Errorf("distributed: Init: %w", err)
	}
	if err := agreeBackend(ctx, opts); err != nil {
		return nil, err
	}
	return b.Init(ctx, opts)
}

// agreeBackend refuses a rank whose backend differs from rank 0's: rank 0
// sets its backend's name under <Prefix>/backend, every other rank gets
// it (bounded by Group.Timeout) and compares. Without it, ranks on two
// backends would each wait for the other's rendezvous until the timeout.
// Backends with their own rendezvous (no store), worlds of one and
// options that the backend will refuse skip it.
func agreeBackend(ctx context.Context, opts Options) error {
	if opts.Store == nil || opts.WorldSize <= 1 || opts.Rank < 0 || opts.Rank >= opts.WorldSize || opts.Group.Timeout < 0 {
		return nil // nothing to agree on, or options the backend refuses
	}
	name := cmp.Or(opts.Backend, DefaultBackend)
	key := cmp.Or(opts.Prefix, DefaultPrefix) + "/backend"
	ctx, cancel := context.WithTimeout(ctx, cmp.Or(opts.Group.Timeout, DefaultTimeout))
	defer cancel()
	if opts.Rank == 0 {
		if err := opts.Store.Set(ctx, key, []byte(name)); err != nil {
			return fmt.Errorf("distributed: Init: rank 0: publishing the backend under %s: %w", key, err)
		}
		return nil
	}
	v, err := opts.Store.Get(ctx, key)
	if err != nil {
		return fmt.Errorf("distributed: Init: rank %d: waiting for rank 0 to publish its backend under %s: %w", opts.Rank, key, err)
	}
	if string(v) != name {
		return fmt.Errorf("distributed: Init: rank %d uses backend %q but rank 0 uses %q: every rank of a job must use the same backend (Options.Backend, COHORT_BACKEND)", opts.Rank, name, v)
	}
	return nil
}

// InitFromEnv joins the job described by the environment (torchrun's
// contract, Slurm, OpenMPI, …; see rendezvous.FromEnv) with default
// options: it connects to the job's store, then calls Init. The returned
// group also owns the store (on rank 0, the store's server) and closes it
// last.
//
// COHORT_BACKEND names the backend (Options.Backend). One with its own
// rendezvous (COHORT_BACKEND=mpi: the process was started by mpirun,
// mpiexec or srun, and MPI itself says who is rank what) needs no store.
func InitFromEnv(ctx context.Context) (ProcessGroup, error) {
	return InitFromEnvOn(ctx, tensor.CPU)
}

// InitFromEnvOn is InitFromEnv for a program whose tensors are on dev
// (its -device flag): with COHORT_BACKEND unset, a CUDA device gets the
// nccl backend and the CPU the native one (Init's choice by
// Options.Device); COHORT_BACKEND, when set, wins, and one that cannot
// take dev's tensors is refused naming both.
//
// A world of one (no launcher, or a launcher of one process) with
// COHORT_BACKEND unset gets the default backend whatever dev is: its
// group moves no tensor, so a one-GPU program needs no NCCL library, as
// a PyTorch script on one GPU needs no process group.
func InitFromEnvOn(ctx context.Context, dev tensor.Device) (ProcessGroup, error) {
	env := os.Getenv("COHORT_BACKEND")
	if env == "" && !dev.IsCPU() {
		if info, err := rendezvous.FromEnv(os.Getenv); err == nil && info.WorldSize == 1 {
			dev = tensor.CPU
		}
	}
	name, err := chooseBackend(env, dev)
	if err != nil {
		if env != "" {
			return nil, fmt.Errorf("distributed: InitFromEnv: COHORT_BACKEND=%q: %w", env, err)
		}
		return nil, fmt.Errorf("distributed: InitFromEnv: %w", err)
	}
	b, err := lookup(name)
	if err != nil {
		return nil, fmt.Errorf("distributed: InitFromEnv: COHORT_BACKEND=%q: %w", env, err)
	}
	if b.OwnRendezvous {
		return Init(ctx, Options{Backend: name, Device: dev})
	}
	info, err := rendezvous.FromEnv(os.Getenv)
	if err != nil {
		return nil, fmt.Errorf("distributed: InitFromEnv: %w", err)
	}
	wd, err := WatchdogFromEnv(os.Getenv)
	if err != nil {
		return nil, fmt.Errorf("distributed: InitFromEnv: %w", err)
	}
	return InitFromInfo(ctx, info, Options{Backend: name, Device: dev, Watchdog: wd})
}

// InitFromInfo is InitFromEnv for a rendezvous.Info already read, with
// options: Store, Rank, WorldSize and (unless set) Token, Host and
// Group.Timeout (COHORT_TIMEOUT, which also bounds reaching the store)
// come from info, and Prefix is suffixed with the run id and restart
// count. The returned group owns the store (Options.CloseStore).
func InitFromInfo(ctx context.Context, info rendezvous.Info, opts Options) (ProcessGroup, error) {
	info, err := rendezvous.ResolveMaster(ctx, info, rendezvous.Resolver{}) // Slurm node names not in DNS
	if err != nil {
		return nil, fmt.Errorf("distributed: InitFromEnv: %w", err)
	}
	if opts.Group.Timeout == 0 {
		opts.Group.Timeout = info.Timeout // COHORT_TIMEOUT; 0 keeps DefaultTimeout
	}
	if opts.TCPCongestion == "" {
		opts.TCPCongestion = os.Getenv("COHORT_TCP_CONGESTION")
	}
	if info.ErrorFile != "" { // a signal that ends ctx is the launcher's culprit
		context.AfterFunc(ctx, func() { rendezvous.RecordSignal(ctx, info.ErrorFile) })
	}
	cctx, cancel := context.WithTimeout(ctx, cmp.Or(opts.Group.Timeout, DefaultTimeout))
	defer cancel()
	st, err := rendezvous.Connect(cctx, info, rendezvous.Options{})
	if err != nil {
		return nil, fmt.Errorf("distributed: InitFromEnv: %w", err)
	}
	opts.Store, opts.Rank, opts.WorldSize = st, info.Rank, info.WorldSize
	opts.CloseStore = true
	if opts.Token == nil && info.Token != "" {
		opts.Token = []byte(info.Token)
	}
	if opts.Host == "" && info.MasterAddr != "" {
		opts.Host = routeTo(info.MasterAddr, info.MasterPort)
	}
	if opts.Prefix == "" {
		opts.Prefix = DefaultPrefix
	}
	if info.RunID != "" || info.RestartCount > 0 {
		opts.Prefix += fmt.Sprintf("/%s/%d", info.RunID, info.RestartCount)
	}
	pg, err := Init(ctx, opts)
	if err != nil {
		st.Close()
		return nil, err
	}
	return pg, nil
}

// routeTo returns this host's address on the route to host:port (no
// packet is sent), or "" if there is none.
func routeTo(host string, port int) string {
	c, err := net.Dial("udp", net.JoinHostPort(host, strconv.Itoa(port)))
	if err != nil {
		return ""
	}
	defer c.Close()
	a, ok := c.LocalAddr().(*net.UDPAddr)
	if !ok {
		return ""
	}
	return a.IP.String()
}

// NewGroup forms a subgroup of pg from the listed ranks of pg (in that
// order: ranks[i] becomes rank i of the subgroup). It is a collective op
// of pg: every rank of pg must call it, with the same list, in the same
// order relative to pg's other ops. Ranks not in the list get a nil group
// and a nil error. The subgroup shares pg's connections, runs its ops
// independently of pg's (in its own sequence) and is closed with pg.
func NewGroup(ctx context.Context, pg ProcessGroup, ranks []int) (ProcessGroup, error) {
	s, ok := pg.(interface {
		NewGroup(context.Context, []int) (ProcessGroup, error)
	})
	if !ok {
		return nil, fmt.Errorf("distributed: NewGroup: %T does not support subgroups", pg)
	}
	return s.NewGroup(ctx, ranks)
}

// Members returns what a backend's NewGroup needs of its rank list: the
// global ranks of ranks (indices into a group whose global ranks are
// groupRanks) and the index among them of the group's rank self, -1 if
// self is not a member.
func Members(ranks, groupRanks []int, self int) (global []int, me int) {
	me = -1
	global = make([]int, len(ranks))
	for i, r := range ranks {
		global[i] = groupRanks[r]
		if r == self {
			me = i
		}
	}
	return global, me
}

// SendsBuffered reports whether pg's sends complete without waiting for
// the matching receive: true of the native backend on every transport
// (whose sends land in a ring, a socket or a queue), false of the MPI
// backend, whose large sends wait for their receive, and of any other
// implementation that does not say so (a SendsBuffered method).
// pipeline.Options.SendsBuffered wants it.
func SendsBuffered(pg ProcessGroup) bool {
	s, ok := pg.(interface{ SendsBuffered() bool })
	return ok && s.SendsBuffered()
}

// Completion returns the channel closed when w is done, for a check that
// does not block (or a select that waits for other things too). Unlike
// w.Done it does not count as waiting for w: an op of the native backend
// launched ahead of its caller (a bucket's reduction during backward)
// stays one the transport need not poll for (transport.WaitHint) until
// someone calls Wait or Done. For a Work without a Completion method it
// is w.Done().
func Completion(w Work) <-chan struct{} {
	if c, ok := w.(interface{ Completion() <-chan struct{} }); ok {
		return c.Completion()
	}
	return w.Done()
}

// Watch starts pg's watchdog, publishing through st under prefix, which
// every rank of the job must share and no other job may use. Every rank
// of pg should call it (a rank that does not is reported as sending no
// heartbeat). Subgroups made from pg afterwards are watched too. The
// watchdog belongs to pg: it stops when pg breaks or closes. Calling
// Watch twice, or with a negative Interval, does nothing. The native
// backend has one (see its watchdog.go); a group without a Watch method
// is an error.
func Watch(pg ProcessGroup, st store.Store, prefix string, opts WatchdogOptions) error {
	w, ok := pg.(interface {
		Watch(store.Store, string, WatchdogOptions) error
	})
	if !ok {
		return fmt.Errorf("distributed: Watch: %T has no flight recorder", pg)
	}
	return w.Watch(st, prefix, opts)
}

// JobID returns the identity of the job whose world group pg is: a random
// value that rank 0 drew when the job started and that every rank of it,
// and only they, learned from the job's store. It is "" for a world of one,
// a group of the MPI backend (or any group without a JobID method), a
// subgroup or a group made by native.New. It is not a secret where any
// process can read the store (no COHORT_TOKEN); it tells the job's
// processes from other jobs' (package obs keys the run page's reports with
// it).
func JobID(pg ProcessGroup) string {
	if j, ok := pg.(interface{ JobID() string }); ok {
		return j.JobID()
	}
	return ""
}
