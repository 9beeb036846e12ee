package native

import (
	"context"
	"fmt"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/cohortml/cohort/distributed"
	"github.com/cohortml/cohort/distributed/transport"
	"github.com/cohortml/cohort/distributed/transport/inproc"
	"github.com/cohortml/cohort/distributed/transport/route"
	"github.com/cohortml/cohort/distributed/transport/tcp"
	"github.com/cohortml/cohort/internal/affinity"
)

func init() {
	distributed.Register("native", distributed.Backend{Init: Init})
}

// config is Init's options and what Init learns on the way.
type config struct {
	distributed.Options

	hostID       string        // this rank's host identity; "" means hostIdentity() (tests set it)
	localRanks   int           // ranks on this host, this one included (set by connect)
	hostCPUs     int           // CPUs those ranks may run on between them (set by connect)
	jobNonce     string        // the job's identity, once joined (see join.go)
	joinProgress time.Duration // progress interval; 0 means joinProgressEvery (tests set it)
}

func (o *config) validate() error {
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
			return fmt.Errorf("distributed: Init: transport inproc connects goroutines of one process; for %d ranks build inproc.NewMesh(%d) and call native.New", o.WorldSize, o.WorldSize)
		}
	default:
		return fmt.Errorf("distributed: Init: unknown transport %q (want auto, tcp, shm or inproc)", o.Transport)
	}
	return validateGroup(o.Group)
}

// Init is distributed.Init for this backend (registered as "native"):
// it joins the job's world group over a transport it connects through
// opts.Store, as distributed.Init documents.
func Init(ctx context.Context, opts distributed.Options) (distributed.ProcessGroup, error) {
	return initConfig(ctx, config{Options: opts})
}

func initConfig(ctx context.Context, opts config) (distributed.ProcessGroup, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	if opts.Prefix == "" {
		opts.Prefix = distributed.DefaultPrefix
	}
	if opts.Group.Timeout == 0 {
		opts.Group.Timeout = distributed.DefaultTimeout
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
	if opts.CloseStore && opts.Store != nil {
		g.closeLast = opts.Store.Close
	}
	return g, nil
}

// JobID implements distributed.JobID: the job's nonce for a world group
// made by Init, "" otherwise.
func (g *group) JobID() string { return g.job }

func ranksOf(n int) []int {
	r := make([]int, n)
	for i := range r {
		r[i] = i
	}
	return r
}

// storeKey names one rank's entry of kind what.
func (o *config) storeKey(what string, rank int) string {
	return fmt.Sprintf("%s/%s/%d", o.Prefix, what, rank)
}

// gather publishes this rank's value under what and returns every rank's.
func (o *config) gather(ctx context.Context, what, value string) ([]string, error) {
	return o.gatherFrom(ctx, what, value, nil)
}

// gatherFrom publishes this rank's value under what and returns the values
// of the ranks in from (nil: every rank) in a world-sized slice, "" for
// the others.
func (o *config) gatherFrom(ctx context.Context, what, value string, from []int) ([]string, error) {
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
func connect(ctx context.Context, o *config) (transport.Transport, error) {
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
func (o *config) localCPUs(ctx context.Context, local []int) (int, error) {
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
func connectMixed(ctx context.Context, o *config, local, remote []int) (transport.Transport, error) {
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
func connectTCP(ctx context.Context, o *config, oneHost bool, peers []int) (transport.Transport, error) {
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
	return finishConnect[*tcp.Transport](ctx, o, "tcp", net.JoinHostPort(advertise, port), dial, ln)
}

// listener is a transport's listener (tcp.Listener, shm.Listener).
type listener[T transport.Transport] interface {
	Connect(ctx context.Context, addrs []string) (T, error)
	Close() error
}

// finishConnect publishes this rank's address addr for the transport
// name, gathers those of the ranks dial (nil: every rank's) and connects
// ln to them; it closes ln if the gathering fails.
func finishConnect[T transport.Transport](ctx context.Context, o *config, name, addr string, dial []int, ln listener[T]) (transport.Transport, error) {
	addrs, err := o.gatherFrom(ctx, name, addr, dial)
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
// may use (mine, its affinity; numCPU when unknown); 0, the transport's
// own choice from what waiting costs on this machine, when the ranks
// outnumber the CPUs (it then polls yielding the CPU, for a time set by
// the measured futex wake-up, or not at all; see shm.Options.Spin); and
// shmSpin otherwise. In the first case a polling thread holds a CPU that nothing
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
	switch {
	case localRanks*gomaxprocs <= hostCPUs && gomaxprocs <= cpus:
		return shmSpinLong
	case localRanks > hostCPUs:
		return 0
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
