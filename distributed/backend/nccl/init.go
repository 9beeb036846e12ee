package nccl

import (
	"cmp"
	"context"
	"fmt"
	"hash/fnv"
	"os"
	"strconv"

	"github.com/cohortml/cohort/device/nccl"
	"github.com/cohortml/cohort/distributed"
	"github.com/cohortml/cohort/distributed/store"
)

func init() {
	distributed.Register("nccl", distributed.Backend{Init: Init, Devices: []string{"cuda"}})
}

// Init joins the world group on NCCL (Options.Backend "nccl", or
// COHORT_BACKEND=nccl through InitFromEnv). It loads libnccl (one line
// naming every place looked when it is missing) and the CUDA driver,
// takes this rank's GPU (LOCAL_RANK among the visible devices), refuses a
// second rank on the same GPU, and joins the communicator whose unique id
// rank 0 publishes in opts.Store under opts.Prefix. Group.Timeout
// (COHORT_TIMEOUT) bounds the wait for the id and every op.
func Init(ctx context.Context, opts distributed.Options) (distributed.ProcessGroup, error) {
	lib, err := nccl.Load()
	if err != nil {
		return nil, fmt.Errorf("distributed: Init: backend nccl: %w", err)
	}
	dev, err := openDevice(lib, os.Getenv)
	if err != nil {
		return nil, fmt.Errorf("distributed: Init: backend nccl: rank %d: %w", opts.Rank, err)
	}
	g, err := initWith(ctx, opts, dev, dev)
	if err != nil {
		dev.Close()
		return nil, err
	}
	g.closeDevice = dev.Close
	return g, nil
}

// initWith is Init over a given device and joiner (tests pass a fake).
func initWith(ctx context.Context, opts distributed.Options, dev Device, j Joiner) (*group, error) {
	if opts.WorldSize < 1 || opts.Rank < 0 || opts.Rank >= opts.WorldSize {
		return nil, fmt.Errorf("distributed: Init: backend nccl: rank %d of world size %d", opts.Rank, opts.WorldSize)
	}
	if opts.Store == nil && opts.WorldSize > 1 {
		return nil, fmt.Errorf("distributed: Init: backend nccl: rank %d: no store (the unique id travels through it)", opts.Rank)
	}
	prefix := cmp.Or(opts.Prefix, distributed.DefaultPrefix) + "/nccl"
	timeout := cmp.Or(opts.Group.Timeout, distributed.DefaultTimeout)
	ranks := make([]int, opts.WorldSize)
	for i := range ranks {
		ranks[i] = i
	}
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if opts.WorldSize > 1 {
		if err := claimDevice(cctx, opts.Store, prefix, dev, opts.Rank); err != nil {
			return nil, err
		}
	}
	g := &group{dev: dev, joiner: j, st: opts.Store, me: opts.Rank, timeout: timeout}
	if err := g.join(cctx, prefix, ranks, opts.Rank); err != nil {
		return nil, fmt.Errorf("distributed: Init: backend nccl: %w", err)
	}
	if opts.CloseStore && opts.Store != nil {
		g.closeLast = opts.Store.Close
	}
	if opts.WorldSize > 1 {
		g.watch(opts.Store, prefix, opts.Watchdog)
	}
	return g, nil
}

// claimDevice refuses a second rank on this rank's GPU: NCCL would hang
// or fail with two ranks of one communicator on one device.
func claimDevice(ctx context.Context, st store.Store, prefix string, dev Device, rank int) error {
	host, _ := os.Hostname()
	key := fmt.Sprintf("%s/gpu/%s/%s", prefix, host, dev.BusID())
	me := []byte(strconv.Itoa(rank))
	got, err := st.CompareAndSwap(ctx, key, nil, me)
	if err != nil {
		return fmt.Errorf("distributed: Init: backend nccl: rank %d: claiming GPU %s: %w", rank, dev.BusID(), err)
	}
	if string(got) != string(me) {
		return fmt.Errorf("distributed: Init: backend nccl: ranks %s and %d are both on GPU %d (%s) of host %s: NCCL needs one GPU per rank; "+
			"give each local rank its own GPU (CUDA_VISIBLE_DEVICES or LOCAL_RANK), or run more ranks than GPUs on the native backend (COHORT_BACKEND=native), whose staging of device tensors through host memory is the path for that",
			got, rank, dev.Ordinal(), dev.BusID(), host)
	}
	return nil
}

// join makes g the communicator of ranks (global ranks; this process is
// ranks[rank]): rank 0 creates the unique id and publishes it under
// prefix, the others read it, bounded by ctx, and every rank joins.
func (g *group) join(ctx context.Context, prefix string, ranks []int, rank int) error {
	g.prefix, g.ranks, g.rank = prefix, ranks, rank
	h := fnv.New32a()
	h.Write([]byte(prefix))
	g.id = h.Sum32()
	var id nccl.UniqueID
	key := prefix + "/id"
	if rank == 0 {
		var err error
		if id, err = g.joiner.NewID(); err != nil {
			return fmt.Errorf("rank %d: creating the unique id: %w", g.me, err)
		}
		if len(ranks) > 1 {
			if err := g.st.Set(ctx, key, id.Internal[:]); err != nil {
				return fmt.Errorf("rank %d: publishing the unique id under %s: %w", g.me, key, err)
			}
		}
	} else {
		b, err := g.st.Get(ctx, key)
		if err != nil {
			return fmt.Errorf("rank %d: waiting for rank %d's unique id under %s: %w", g.me, ranks[0], key, err)
		}
		if len(b) != len(id.Internal) {
			return fmt.Errorf("rank %d: the unique id under %s has %d bytes, want %d (a rank on another backend? every rank must use the same COHORT_BACKEND)", g.me, key, len(b), len(id.Internal))
		}
		copy(id.Internal[:], b)
	}
	comm, err := g.joiner.Join(ctx, id, len(ranks), rank)
	if err != nil {
		return fmt.Errorf("rank %d: joining the communicator of %d ranks: %w", g.me, len(ranks), err)
	}
	s, err := g.dev.NewStream()
	if err != nil {
		comm.Destroy()
		return fmt.Errorf("rank %d: creating the communication stream: %w", g.me, err)
	}
	g.comm, g.stream = comm, s
	g.start()
	return nil
}

// NewGroup implements distributed.NewGroup: every rank of g calls it with
// the same list; the members join a communicator of their own (its id
// under g's prefix, numbered by the call), the others get nil.
func (g *group) NewGroup(ctx context.Context, ranks []int) (distributed.ProcessGroup, error) {
	seen := make(map[int]bool, len(ranks))
	for _, r := range ranks {
		switch {
		case r < 0 || r >= g.Size():
			return nil, fmt.Errorf("distributed: NewGroup: rank %d out of range [0, %d)", r, g.Size())
		case seen[r]:
			return nil, fmt.Errorf("distributed: NewGroup: rank %d listed twice", r)
		}
		seen[r] = true
	}
	g.mu.Lock()
	g.nchild++
	k := g.nchild
	closed := g.closed
	g.mu.Unlock()
	if closed {
		return nil, fmt.Errorf("distributed: NewGroup: %w", distributed.ErrClosed)
	}
	global, me := distributed.Members(ranks, g.ranks, g.rank)
	if me < 0 {
		return nil, nil
	}
	cctx, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	c := &group{dev: g.dev, joiner: g.joiner, st: g.st, me: g.me, timeout: g.timeout}
	if err := c.join(cctx, fmt.Sprintf("%s/g%d", g.prefix, k), global, me); err != nil {
		return nil, fmt.Errorf("distributed: NewGroup %v: %w", ranks, err)
	}
	g.mu.Lock()
	g.children = append(g.children, c)
	wd := g.wd
	g.mu.Unlock()
	if wd != nil {
		c.watch(wd.st, wd.prefix, wd.opts)
	}
	return c, nil
}
