package distributed

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/cohortml/cohort/distributed/rendezvous"
	"github.com/cohortml/cohort/distributed/store"
	"github.com/cohortml/cohort/distributed/transport"
	"github.com/cohortml/cohort/distributed/transport/inproc"
	"github.com/cohortml/cohort/distributed/transport/route"
	"github.com/cohortml/cohort/distributed/transport/tcp"
	"github.com/cohortml/cohort/internal/affinity"
)

// Options configures Init. Store, Rank and WorldSize are required (Store
// only for WorldSize > 1); the zero value of every other field works.
type Options struct {
	// Backend is "native" (or "") for cohort's own collectives over
	// Transport, or "mpi" for the MPI library's (backend_mpi.go), which
	// takes the rank and world size from MPI itself: Store, Transport and
	// the other connection fields are then unused, and Rank and WorldSize,
	// if WorldSize is set, must match MPI's.
	Backend string
	// Store carries the ranks' transport addresses. The caller owns it.
	Store store.Store
	// Rank and WorldSize place this process in the job.
	Rank, WorldSize int
	// Transport is "auto" (or ""), "tcp", "shm" or "inproc". Auto reaches
	// the ranks on this host through shared memory and the others over
	// TCP: shm alone when every rank is on this host, shm for those on
	// this host and tcp for the rest (combined by package route) when the
	// job spans hosts, and tcp alone when no other rank shares this host
	// or the shm transport is not built in. "tcp" uses TCP between every
	// pair of ranks; "shm" requires every rank on this host. inproc only
	// serves a world of one process; for several ranks in one process
	// build an inproc mesh and call New.
	Transport string
	// TCPCongestion is the congestion control of the job's TCP
	// connections (tcp.Options.Congestion): "" keeps the kernel's
	// default, except that loopback connections trade BBR for cubic;
	// "system" keeps it always; a name such as "cubic" or "dctcp" asks
	// for that one. InitFromInfo and InitFromEnv take it from
	// COHORT_TCP_CONGESTION when it is empty.
	TCPCongestion string
	// Host is the address other hosts reach this rank at (an IP or a
	// name); empty means the host name. Ranks on one host connect over
	// loopback whatever it says.
	Host string
	// Token authenticates transport connections (see tcp.Options.Token).
	Token []byte
	// Prefix namespaces the store keys, so that several groups (or
	// restarts) can share one store; default "cohort/dist".
	Prefix string
	// Group configures the returned group (timeout, tuning). Its Timeout
	// also bounds Init's wait for the other ranks to join.
	Group GroupOptions
	// Log receives Init's progress ("waiting for ranks [1 3] to join")
	// about every 10 s while it waits; nil means slog.Default().
	Log *slog.Logger
	// Watchdog attributes hangs: an op running longer than its interval
	// is diagnosed from every rank's recent ops (watchdog.go). The zero
	// value turns it on with DefaultWatchdog (60 s).
	Watchdog WatchdogOptions

	hostID       string        // this rank's host identity; "" means hostIdentity() (tests set it)
	localRanks   int           // ranks on this host, this one included (set by connect)
	hostCPUs     int           // CPUs those ranks may run on between them (set by connect)
	jobNonce     string        // the job's identity, once joined (see join.go)
	joinProgress time.Duration // progress interval; 0 means joinProgressEvery (tests set it)
}

func (o *Options) validate() error {
	switch {
	case o.WorldSize < 1:
		return fmt.Errorf("distributed: Init: WorldSize %d < 1", o.WorldSize)
	case o.Rank < 0 || o.Rank >= o.WorldSize:
		return fmt.Errorf("distributed: Init: Rank %d out of range [0, %d)", o.Rank, o.WorldSize)
	case o.WorldSize > 1 && o.Store == nil:
		return fmt.Errorf("distributed: Init: rank %d of %d: no Store to exchange addresses through", o.Rank, o.WorldSize)
	}
	switch o.Transport {
	case "", "auto", "tcp", "shm":
	case "inproc":
		if o.WorldSize > 1 {
			return fmt.Errorf("distributed: Init: transport inproc connects goroutines of one process; for %d ranks build inproc.NewMesh(%d) and call distributed.New", o.WorldSize, o.WorldSize)
		}
	default:
		return fmt.Errorf("distributed: Init: unknown transport %q (want auto, tcp, shm or inproc)", o.Transport)
	}
	return o.Group.validate()
}

// Init joins the job's world group: every rank calls it with the same
// store and world size and its own rank. It claims this rank in the store
// (a second claimant of a rank is refused, and the groups of the job abort
// naming it; see join.go), publishes where this rank can be reached, reads
// every other rank's address from the store, connects the transport and
// returns the group, which owns the transport. It blocks until every rank
// has arrived, ctx ends or Group.Timeout passes, reporting the ranks it
// still waits for about every 10 s; the error names the missing ranks.
// Each Init needs a Prefix of its own within one store.
func Init(ctx context.Context, opts Options) (ProcessGroup, error) {
	switch opts.Backend {
	case "", "native":
	case "mpi":
		return initMPI(opts)
	default:
		return nil, fmt.Errorf("distributed: Init: unknown backend %q (want native or mpi)", opts.Backend)
	}
	if err := opts.validate(); err != nil {
		return nil, err
	}
	if opts.Prefix == "" {
		opts.Prefix = "cohort/dist"
	}
	if opts.Group.Timeout == 0 {
		opts.Group.Timeout = DefaultTimeout
	}
	var dupKey string
	if opts.WorldSize > 1 {
		jctx, cancel := context.WithTimeout(ctx, opts.Group.Timeout)
		defer cancel()
		ctx = jctx
		var err error
		if dupKey, err = opts.joinJob(ctx); err != nil {
			return nil, err
		}
		if len(opts.Token) == 0 {
			// No secret: the job's nonce still keeps other jobs' processes
			// out of the transport handshake.
			opts.Token = []byte("cohort-job:" + opts.jobNonce)
		}
	}
	t, err := connect(ctx, &opts)
	if err != nil {
		return nil, err
	}
	g, err := newGroup(t, !opts.Group.KeepTransport, 0, ranksOf(t.Size()), opts.Group)
	if err != nil {
		t.Close()
		return nil, err
	}
	g.job = opts.jobNonce
	if dupKey != "" {
		g.watchDuplicate(opts.Store, dupKey)
		g.watch(opts.Store, opts.Prefix, opts.Watchdog)
	}
	return g, nil
}

// JobID returns the identity of the job whose world group pg is: a random
// value that rank 0 drew when the job started and that every rank of it,
// and only they, learned from the job's store. It is "" for a world of one,
// a group of the MPI backend, a subgroup or a group made by New. It is not
// a secret where any process can read the store (no COHORT_TOKEN); it
// tells the job's processes from other jobs' (package obs keys the run
// page's reports with it).
func JobID(pg ProcessGroup) string {
	if g, ok := pg.(*group); ok {
		return g.job
	}
	return ""
}

func ranksOf(n int) []int {
	r := make([]int, n)
	for i := range r {
		r[i] = i
	}
	return r
}

// storeKey names one rank's entry of kind what.
func (o *Options) storeKey(what string, rank int) string {
	return fmt.Sprintf("%s/%s/%d", o.Prefix, what, rank)
}

// gather publishes this rank's value under what and returns every rank's.
func (o *Options) gather(ctx context.Context, what, value string) ([]string, error) {
	return o.gatherFrom(ctx, what, value, nil)
}

// gatherFrom publishes this rank's value under what and returns the values
// of the ranks in from (nil: every rank) in a world-sized slice, "" for
// the others.
func (o *Options) gatherFrom(ctx context.Context, what, value string, from []int) ([]string, error) {
	if from == nil {
		from = ranksOf(o.WorldSize)
	}
	if err := o.Store.Set(ctx, o.storeKey(what, o.Rank), []byte(value)); err != nil {
		return nil, fmt.Errorf("distributed: Init: rank %d: publish %s: %w", o.Rank, what, err)
	}
	return o.await(ctx, what, from, func(r int) string { return o.storeKey(what, r) })
}

// connect builds the transport: first the ranks learn which of them share
// a host, then each listens where its peers can reach it and publishes
// the address. Every rank derives the same plan from the same host list,
// so the peer sets of the parts agree: under auto, ranks that share a host
// connect through shm and all other pairs through tcp; a rank alone on its
// host uses tcp for everyone.
func connect(ctx context.Context, o *Options) (transport.Transport, error) {
	if o.WorldSize == 1 {
		return inproc.NewMesh(1)[0], nil
	}
	me := o.hostID
	if me == "" {
		me = hostIdentity()
	}
	hosts, err := o.gather(ctx, "host", me)
	if err != nil {
		return nil, err
	}
	var local, remote []int // the other ranks on this host, and elsewhere
	for r, h := range hosts {
		switch {
		case r == o.Rank:
		case h == me:
			local = append(local, r)
		default:
			remote = append(remote, r)
		}
	}
	oneHost := len(remote) == 0
	o.localRanks = len(local) + 1
	if o.hostCPUs, err = o.localCPUs(ctx, local); err != nil {
		return nil, err
	}
	kind := o.Transport
	switch kind {
	case "", "auto":
		switch {
		case !shmAvailable || len(local) == 0:
			kind = "tcp"
		case oneHost:
			kind = "shm"
		default:
			return connectMixed(ctx, o, local, remote)
		}
	case "shm":
		if !oneHost {
			r := remote[0]
			return nil, fmt.Errorf("distributed: Init: transport shm needs every rank on one host, but rank %d is on %s and rank %d on %s (transport auto uses shm within hosts and tcp between them)",
				o.Rank, hostName(me), r, hostName(hosts[r]))
		}
		if !shmAvailable {
			return nil, fmt.Errorf("distributed: Init: transport shm is not built into this binary")
		}
	}
	if kind == "shm" {
		return connectShm(ctx, o, nil)
	}
	return connectTCP(ctx, o, oneHost, nil)
}

// localCPUs returns how many CPUs the ranks on this host (this one and
// local) may run on between them: the union of their CPU masks, which
// the ranks exchange. Whether waiting ranks may poll depends on it (see
// shm.Options.CPUs): ranks bound each to its own CPU (by cohort run, or
// mpirun's binding) fit the host although each process sees one CPU.
// Where masks are unknown it is this process's runtime.NumCPU().
func (o *Options) localCPUs(ctx context.Context, local []int) (int, error) {
	if len(local) == 0 {
		return runtime.NumCPU(), nil
	}
	mine := affinity.Allowed() // published even when unknown (""): the peers wait for it
	parts := make([]string, len(mine))
	for i, c := range mine {
		parts[i] = strconv.Itoa(c)
	}
	masks, err := o.gatherFrom(ctx, "cpus", strings.Join(parts, ","), local)
	if err != nil {
		return 0, err
	}
	return countCPUs(mine, local, masks, runtime.NumCPU())
}

// countCPUs counts the CPUs of the union of mine and the lists (comma-
// separated numbers) the ranks in local published in masks; dflt when
// some rank could not tell (nil or "").
func countCPUs(mine []int, local []int, masks []string, dflt int) (int, error) {
	if mine == nil {
		return dflt, nil
	}
	union := make(map[int]bool, len(mine))
	for _, c := range mine {
		union[c] = true
	}
	for _, r := range local {
		if masks[r] == "" {
			return dflt, nil
		}
		for f := range strings.SplitSeq(masks[r], ",") {
			c, err := strconv.Atoi(f)
			if err != nil {
				return 0, fmt.Errorf("distributed: Init: rank %d published the CPU list %q: %w", r, masks[r], err)
			}
			union[c] = true
		}
	}
	return len(union), nil
}

// connectMixed connects the ranks on this host (local) through shm and the
// others (remote) through tcp, one after the other (every rank takes the
// same order, so neither waits on the other), and routes each peer to its
// part.
func connectMixed(ctx context.Context, o *Options, local, remote []int) (transport.Transport, error) {
	tt, err := connectTCP(ctx, o, false, remote)
	if err != nil {
		return nil, err
	}
	st, err := connectShm(ctx, o, local)
	if err != nil {
		tt.Close()
		return nil, err
	}
	via := make([]transport.Transport, o.WorldSize)
	via[o.Rank] = st
	for _, r := range local {
		via[r] = st
	}
	for _, r := range remote {
		via[r] = tt
	}
	t, err := route.New(via)
	if err != nil {
		st.Close()
		tt.Close()
		return nil, fmt.Errorf("distributed: Init: rank %d: %w", o.Rank, err)
	}
	return t, nil
}

// connectTCP connects this rank over TCP with peers (nil: every rank),
// over loopback if oneHost.
func connectTCP(ctx context.Context, o *Options, oneHost bool, peers []int) (transport.Transport, error) {
	bind, advertise := "127.0.0.1:0", "127.0.0.1"
	if !oneHost {
		bind, advertise = ":0", o.Host
		if advertise == "" {
			h, err := os.Hostname()
			if err != nil {
				return nil, fmt.Errorf("distributed: Init: rank %d: no Options.Host and no host name: %w", o.Rank, err)
			}
			advertise = h
		}
	}
	topts := tcp.Options{Token: o.Token, Peers: peers, Congestion: o.TCPCongestion}
	if o.localRanks <= o.hostCPUs {
		topts.Spin = tcpSpin
	}
	ln, err := tcp.Listen(ctx, o.Rank, o.WorldSize, bind, topts)
	if err != nil {
		return nil, fmt.Errorf("distributed: Init: rank %d: %w", o.Rank, err)
	}
	_, port, err := net.SplitHostPort(ln.Addr())
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("distributed: Init: rank %d: listener address %q: %w", o.Rank, ln.Addr(), err)
	}
	// This rank dials the lower peers; only their addresses are needed.
	var dial []int // nil: every rank's
	if peers != nil {
		dial = []int{}
		for _, r := range peers {
			if r < o.Rank {
				dial = append(dial, r)
			}
		}
	}
	addrs, err := o.gatherFrom(ctx, "tcp", net.JoinHostPort(advertise, port), dial)
	if err != nil {
		ln.Close()
		return nil, err
	}
	t, err := ln.Connect(ctx, addrs)
	if err != nil {
		return nil, fmt.Errorf("distributed: Init: rank %d: %w", o.Rank, err)
	}
	return t, nil
}

// The shm transport polls for a while before sleeping, which cuts
// latency; with more ranks on this host than cores it yields the CPU
// between polls (see shm.Options.Spin).
const shmSpin = 50 * time.Microsecond

// shmSpinLong is how long a waiter polls over shared memory when polling
// takes a CPU from nobody (see shmSpinFor).
const shmSpinLong = 10 * time.Millisecond

// shmSpinFor returns how long a receiver waiting for a message over
// shared memory (or a sender for ring space) of a job on one host (see
// connectShm) polls before it sleeps on the ring's futex: shmSpinLong
// while the Go threads of this host's ranks (gomaxprocs each, taken to be
// the same on every rank) fit its CPUs and this process's fit the CPUs it
// may use (mine, its affinity; numCPU when unknown), and shmSpin
// otherwise. In the first case a polling thread holds a CPU that nothing
// else of this job wants: polling through a wait of milliseconds, such as
// a pipeline stage's for its neighbour's activation, spares the sender
// the futex wake-up and the receiver its sleep. A GPT-mini stage on one
// CPU got its message 42 µs after the neighbour's compute ended (median),
// against 105 µs when it slept. Otherwise a polling thread would take time
// slices from this process's other threads (cohort run's bound workers
// keep their launcher's GOMAXPROCS on fewer CPUs) or from a peer.
func shmSpinFor(localRanks, hostCPUs, gomaxprocs int, mine []int, numCPU int) time.Duration {
	cpus := len(mine)
	if cpus == 0 {
		cpus = numCPU
	}
	if localRanks*gomaxprocs <= hostCPUs && gomaxprocs <= cpus {
		return shmSpinLong
	}
	return shmSpin
}

// A tcp receiver polls its socket for a while before it waits for the
// link's reader goroutine, while the ranks on this host fit its CPUs (see
// tcp.Options.Spin).
const tcpSpin = 50 * time.Microsecond

// hostIdentity names this host and the namespaces that decide whether
// loopback and shared memory reach another process: the host name, the
// boot id and the network and mount namespaces (where /proc has them).
func hostIdentity() string {
	h, _ := os.Hostname()
	parts := []string{h}
	if b, err := os.ReadFile("/proc/sys/kernel/random/boot_id"); err == nil {
		parts = append(parts, strings.TrimSpace(string(b)))
	}
	for _, ns := range []string{"net", "mnt"} {
		if l, err := os.Readlink("/proc/self/ns/" + ns); err == nil {
			parts = append(parts, l)
		}
	}
	return strings.Join(parts, "|")
}

func hostName(identity string) string {
	name, _, _ := strings.Cut(identity, "|")
	return strconv.Quote(name)
}

// InitFromEnv joins the job described by the environment (torchrun's
// contract, Slurm, OpenMPI, …; see rendezvous.FromEnv) with default
// options: it connects to the job's store, then calls Init. The returned
// group also owns the store (on rank 0, the store's server) and closes it
// last.
//
// COHORT_BACKEND=mpi selects the MPI backend instead (Options.Backend):
// the process was started by mpirun, mpiexec or srun, and MPI itself says
// who is rank what, so no store is needed.
func InitFromEnv(ctx context.Context) (ProcessGroup, error) {
	switch b := os.Getenv("COHORT_BACKEND"); b {
	case "", "native":
	case "mpi":
		return Init(ctx, Options{Backend: "mpi"})
	default:
		return nil, fmt.Errorf("distributed: InitFromEnv: COHORT_BACKEND=%q: want native or mpi", b)
	}
	info, err := rendezvous.FromEnv(os.Getenv)
	if err != nil {
		return nil, fmt.Errorf("distributed: InitFromEnv: %w", err)
	}
	wd, err := WatchdogFromEnv(os.Getenv)
	if err != nil {
		return nil, fmt.Errorf("distributed: InitFromEnv: %w", err)
	}
	return InitFromInfo(ctx, info, Options{Watchdog: wd})
}

// InitFromInfo is InitFromEnv for a rendezvous.Info already read, with
// options: Store, Rank, WorldSize and (unless set) Token, Host and
// Group.Timeout (COHORT_TIMEOUT, which also bounds reaching the store)
// come from info, and Prefix is suffixed with the run id and restart
// count.
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
	if opts.Token == nil && info.Token != "" {
		opts.Token = []byte(info.Token)
	}
	if opts.Host == "" && info.MasterAddr != "" {
		opts.Host = routeTo(info.MasterAddr, info.MasterPort)
	}
	if opts.Prefix == "" {
		opts.Prefix = "cohort/dist"
	}
	if info.RunID != "" || info.RestartCount > 0 {
		opts.Prefix += fmt.Sprintf("/%s/%d", info.RunID, info.RestartCount)
	}
	pg, err := Init(ctx, opts)
	if err != nil {
		st.Close()
		return nil, err
	}
	g := pg.(*group)
	g.closeLast = st.Close
	return g, nil
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
