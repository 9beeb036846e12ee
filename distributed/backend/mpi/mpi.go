package mpi

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/cohortml/cohort/distributed"
	"github.com/cohortml/cohort/distributed/collective"
	libmpi "github.com/cohortml/cohort/distributed/internal/mpi"
)

// The MPI backend: a ProcessGroup whose ops are the MPI library's own
// collectives, for clusters whose MPI is tuned to their fabric. Options
// {Backend: "mpi"} or COHORT_BACKEND=mpi selects it; the process must
// have been started by mpirun, mpiexec or srun (or alone, as an MPI
// singleton), and its rank and world size are MPI_COMM_WORLD's.
//
// Threading. MPI is initialised, asking for MPI_THREAD_MULTIPLE, by a
// goroutine locked to its OS thread (the MPI goroutine), which also makes
// the blocking calls (MPI_Comm_split, MPI_Comm_free, MPI_Finalize). Ops
// are started with MPI's nonblocking calls (MPI_Iallreduce, …) and
// completed by polling MPI_Test, so ops of several groups can be in
// flight at once, as with the native backend, and an op on one
// communicator never holds up another. Where the library provides
// MPI_THREAD_MULTIPLE, the goroutine that issues an op starts it itself,
// and Wait polls MPI_Test in the waiting goroutine: no hand-off between
// goroutines on the data path, which on this kind of machine costs more
// than a small collective (waking a goroutine on another thread is tens of
// µs). The MPI goroutine then only completes, every 200 µs, the ops nobody
// waits for (so that Done is closed). Where the library provides less
// (or COHORT_MPI_FUNNELED=1 asks for it), every MPI call is made by the
// MPI goroutine: it starts the ops callers queue and polls MPI_Test while
// any are in flight, as MPI_Wait would, and waiters block on a channel.
// Either way Works complete in issue order within a group.
//
// Errors. The communicators use MPI_ERRORS_RETURN, so a failed MPI call
// comes back as an *OpError naming the op and carrying MPI's message
// (*libmpi.Error). A failed or invalid op breaks the group, as in the native
// backend: later ops fail with an *OpError wrapping ErrAborted. The MPI
// backend sends no abort notices: peers that are inside a collective with
// the failed rank wait in MPI, and the launcher ends the job when a
// process exits with an error. A dead peer is MPI's business: Open MPI's
// mpirun aborts the whole job when a process dies (and prints which), and
// the surviving processes never see an error; contexts and
// GroupOptions.Timeout are honoured only until an op is handed to MPI,
// because MPI cannot cancel a collective.
//
// Lifetime. MPI can be initialised once per process. Every Init with the
// MPI backend duplicates MPI_COMM_WORLD; closing the last of those groups
// calls MPI_Finalize, after which a later Init fails. A process must
// close its groups before it exits, or mpirun reports it as having exited
// without finalising.

// mpiProc is this process's MPI: the library and the goroutine that makes
// every call into it. There is one per process because MPI itself is
// process-wide state.
type mpiProc struct {
	lib      *libmpi.Lib
	level    int           // the thread level MPI_Init_thread provided
	funneled bool          // every call through the MPI goroutine (set before loop starts)
	direct   bool          // callers start and complete ops themselves (MULTIPLE and not funneled)
	tasks    chan func()   // run on the MPI goroutine in order
	wake     chan struct{} // a group has become active (direct mode)
	quit     chan struct{} // closed when the MPI goroutine has finalised
	stopped  bool          // the MPI goroutine's: Finalize has run

	amu    sync.Mutex
	active []*mpiGroup // groups with ops in flight

	mu     sync.Mutex // guards worlds
	worlds int        // open world groups
}

var mpiProcess struct {
	sync.Mutex
	p         *mpiProc
	finalized bool
}

// mpiIdleSpin is how long the MPI goroutine polls for new ops before it
// sleeps, and a Wait polls before it blocks: waking a sleeping goroutine
// costs more than a small collective.
const mpiIdleSpin = 30 * time.Microsecond

// startMPI loads and initialises MPI once per process.
func startMPI() (*mpiProc, error) {
	mpiProcess.Lock()
	defer mpiProcess.Unlock()
	if mpiProcess.p != nil {
		return mpiProcess.p, nil
	}
	if mpiProcess.finalized {
		return nil, errors.New("distributed: Init: backend mpi: MPI was finalised when this process's last MPI group closed, and it cannot be initialised twice in one process")
	}
	var names []string
	if n := os.Getenv("COHORT_MPI_LIBRARY"); n != "" {
		names = []string{n}
	}
	lib, err := libmpi.Load(names...)
	if err != nil {
		return nil, fmt.Errorf("distributed: Init: backend mpi: %w", err)
	}
	p := &mpiProc{lib: lib, tasks: make(chan func(), 1024), quit: make(chan struct{}), wake: make(chan struct{}, 1),
		funneled: os.Getenv("COHORT_MPI_FUNNELED") == "1"}
	ready := make(chan error)
	go p.loop(ready)
	if err := <-ready; err != nil {
		return nil, fmt.Errorf("distributed: Init: backend mpi: %s: %w", lib.Name, err)
	}
	mpiProcess.p = p
	return p, nil
}

// mpiBackgroundPoll is how often the MPI goroutine completes the ops
// nobody waits for when callers drive MPI themselves.
const mpiBackgroundPoll = 200 * time.Microsecond

// loop is the MPI goroutine.
func (p *mpiProc) loop(ready chan<- error) {
	runtime.LockOSThread() // MPI's thread for good; the thread ends with the goroutine
	level, err := p.lib.InitThread(libmpi.ThreadMultiple)
	p.level = level
	p.direct = level == libmpi.ThreadMultiple && !p.funneled
	if err == nil {
		// Open MPI reports some failures of nonblocking collectives (in
		// MPI_Test) on MPI_COMM_WORLD rather than the op's communicator.
		err = p.lib.ErrorsReturn(p.lib.CommWorld)
	}
	ready <- err
	if err != nil {
		return
	}
	defer close(p.quit)
	tick := time.NewTimer(time.Hour)
	tick.Stop()
	for !p.stopped {
		busy := p.poll()
		switch {
		case !busy:
			p.idle()
		case p.direct:
			tick.Reset(mpiBackgroundPoll)
			select {
			case f := <-p.tasks:
				f()
			case <-tick.C:
			}
			tick.Stop()
		default:
			for drained := false; !drained && !p.stopped; {
				select {
				case f := <-p.tasks:
					f()
				default:
					drained = true
				}
			}
			if runtime.GOMAXPROCS(0) == 1 {
				runtime.Gosched() // let the waiting goroutines run
			}
		}
	}
}

// idle waits for the next task: it polls for mpiIdleSpin, then sleeps.
func (p *mpiProc) idle() {
	deadline := time.Now().Add(mpiIdleSpin)
	for i := 0; !p.direct; i++ {
		select {
		case f := <-p.tasks:
			f()
			return
		default:
		}
		if i%16 == 15 && time.Now().After(deadline) {
			break
		}
	}
	select {
	case f := <-p.tasks:
		f()
	case <-p.wake:
	}
}

// do runs f on the MPI goroutine and returns its error.
func (p *mpiProc) do(f func() error) error {
	errc := make(chan error, 1)
	select {
	case p.tasks <- func() { errc <- f() }:
	case <-p.quit:
		return errors.New("distributed: backend mpi: MPI is finalised")
	}
	return <-errc
}

// poll completes the finished ops of every group with ops in flight and
// reports whether any remain. A group whose lock a waiter holds is being
// completed by the waiter.
func (p *mpiProc) poll() bool {
	p.amu.Lock()
	groups := slices.Clone(p.active)
	p.amu.Unlock()
	busy := false
	for _, g := range groups {
		if !g.pmu.TryLock() {
			busy = true
			continue
		}
		busy = g.progress() || busy
		g.pmu.Unlock()
	}
	return busy
}

// progress completes g's finished ops in issue order and reports whether
// ops remain in flight. The caller holds g.pmu.
func (g *mpiGroup) progress() bool {
	l := g.p.lib
	for len(g.inflight) > 0 {
		o := g.inflight[0]
		if o.result == nil {
			ok, code := l.Test(&o.r, false)
			if code != libmpi.Success {
				o.result = g.fail(o, l.Err(o.fn, code))
			} else if !ok {
				return true
			} else if o.post != nil {
				if err := o.post(o); err != nil {
					o.result = g.fail(o, err)
				}
			}
		}
		g.inflight[0] = nil
		g.inflight = g.inflight[1:]
		o.finish()
	}
	g.p.amu.Lock()
	if i := slices.Index(g.p.active, g); i >= 0 {
		g.p.active = slices.Delete(g.p.active, i, i+1)
	}
	g.p.amu.Unlock()
	return false
}

// mpiGroup is a ProcessGroup over an MPI communicator.
type mpiGroup struct {
	p      *mpiProc
	comm   libmpi.Handle
	rank   int
	size   int
	me     int // global rank
	tagUB  int
	world  bool
	parent *mpiGroup
	// closeStore closes the store handed over with Options.CloseStore
	// (world groups only), after the communicator.
	closeStore func() error

	mu       sync.Mutex
	seq      uint64
	last     *mpiOp // the last op issued
	closed   bool
	children []*mpiGroup

	pmu      sync.Mutex // guards inflight and broken
	inflight []*mpiOp   // started (or failed) and not yet complete, in issue order
	broken   *distributed.OpError
}

var _ distributed.ProcessGroup = (*mpiGroup)(nil)

func init() {
	distributed.Register("mpi", distributed.Backend{Init: Init, OwnRendezvous: true})
}

// adopt makes c, a communicator just made, g's: MPI returns its errors
// rather than aborting, and g's rank, size and tag bound are read from it.
// It runs on the MPI thread (p.do).
func (g *mpiGroup) adopt(c libmpi.Handle) (err error) {
	l := g.p.lib
	g.comm = c
	if err := l.ErrorsReturn(c); err != nil {
		return err
	}
	if g.rank, err = l.CommRank(c); err != nil {
		return err
	}
	if g.size, err = l.CommSize(c); err != nil {
		return err
	}
	g.tagUB, err = l.TagUpperBound(c)
	return err
}

// Init is distributed.Init for this backend (registered as "mpi"): it
// duplicates MPI_COMM_WORLD, initialising MPI first if no group has. Of
// opts it reads only Rank and WorldSize, which, if WorldSize is set, must
// match MPI's, and CloseStore: a store handed over is closed with the
// group.
func Init(ctx context.Context, opts distributed.Options) (distributed.ProcessGroup, error) {
	p, err := startMPI()
	if err != nil {
		return nil, err
	}
	g := &mpiGroup{p: p, world: true}
	err = p.do(func() error {
		l := p.lib
		c, err := l.CommDup(l.CommWorld)
		if err != nil {
			return err
		}
		return g.adopt(c)
	})
	if err != nil {
		return nil, fmt.Errorf("distributed: Init: backend mpi: %w", err)
	}
	g.me = g.rank
	switch {
	case opts.WorldSize != 0 && opts.WorldSize != g.size:
		return nil, fmt.Errorf("distributed: Init: backend mpi: Options.WorldSize %d but MPI's world has %d processes", opts.WorldSize, g.size)
	case opts.WorldSize != 0 && opts.Rank != g.rank:
		return nil, fmt.Errorf("distributed: Init: backend mpi: Options.Rank %d but MPI gave this process rank %d", opts.Rank, g.rank)
	}
	p.mu.Lock()
	p.worlds++
	p.mu.Unlock()
	if opts.CloseStore && opts.Store != nil {
		g.closeStore = opts.Store.Close
	}
	return g, nil
}

// Info describes the MPI library behind a group of the MPI backend: its
// file, ABI, version and the thread level MPI_Init_thread provided. ok is
// false for a group of another backend.
func Info(pg distributed.ProcessGroup) (info string, ok bool) {
	g, ok := pg.(*mpiGroup)
	if !ok {
		return "", false
	}
	levels := [...]string{"single", "funneled", "serialized", "multiple"}
	level := fmt.Sprint(g.p.level)
	if g.p.level >= 0 && g.p.level < len(levels) {
		level = levels[g.p.level]
	}
	return fmt.Sprintf("%s (%v ABI, thread level %s): %s", g.p.lib.Name, g.p.lib.ABI, level, g.p.lib.Version), true
}

// BackendName is the name the backend is registered under (distributed.BackendName).
func (g *mpiGroup) BackendName() string { return "mpi" }

func (g *mpiGroup) Rank() int { return g.rank }
func (g *mpiGroup) Size() int { return g.size }

// mpiOp is one op of an MPI group; it is its own Work.
type mpiOp struct {
	g     *mpiGroup
	kind  collective.Kind
	fn    string // the MPI function, for errors
	seq   uint64
	ctx   context.Context
	err   error              // invalid arguments
	start func(*mpiOp) int32 // starts the op, writing req
	post  func(*mpiOp) error // after MPI completes it (Avg, 16-bit results, receive length)
	r     libmpi.Request
	pin   runtime.Pinner

	done   chan struct{}
	fin    atomic.Bool
	result error
}

func (o *mpiOp) Done() <-chan struct{} { return o.done }

// Wait completes the group's ops up to this one by polling MPI_Test
// (where callers drive MPI), or polls briefly and then blocks until the
// MPI goroutine has completed it.
func (o *mpiOp) Wait() error {
	if o.g.p.direct {
		for i := 0; !o.fin.Load(); i++ {
			o.g.pmu.Lock()
			o.g.progress()
			o.g.pmu.Unlock()
			if i%8 == 7 {
				runtime.Gosched()
			}
		}
		<-o.done
		return o.result
	}
	if !o.fin.Load() {
		deadline := time.Now().Add(mpiIdleSpin)
		for i := 0; !o.fin.Load(); i++ {
			if i%16 == 15 && time.Now().After(deadline) {
				break
			}
			runtime.Gosched()
		}
	}
	<-o.done
	return o.result
}

func (o *mpiOp) finish() {
	o.pin.Unpin()
	o.fin.Store(true)
	close(o.done)
}

func (g *mpiGroup) opError(o *mpiOp, err error) *distributed.OpError {
	return &distributed.OpError{Op: o.kind.String(), Seq: o.seq, Rank: g.me, Peer: -1, Err: err}
}

// fail records o's failure, breaking the group (MPI goroutine only).
func (g *mpiGroup) fail(o *mpiOp, err error) error {
	e := g.opError(o, err)
	if g.broken == nil {
		g.broken = e
	}
	return e
}

// submit hands o to the MPI goroutine, which starts it (or fails it) in
// issue order.
func (g *mpiGroup) submit(ctx context.Context, o *mpiOp) distributed.Work {
	if ctx == nil {
		ctx = context.Background()
	}
	o.g, o.ctx, o.done = g, ctx, make(chan struct{})
	if g.p.direct {
		g.pmu.Lock() // held from numbering to starting: seq order is issue order
	}
	g.mu.Lock()
	closed := g.closed
	if !closed {
		g.seq++
		o.seq = g.seq
		g.last = o
	}
	g.mu.Unlock()
	if closed {
		if g.p.direct {
			g.pmu.Unlock()
		}
		o.result = g.opError(o, distributed.ErrClosed)
		o.finish()
		return o
	}
	if g.p.direct {
		g.issue(o)
		g.pmu.Unlock()
		return o
	}
	select {
	case g.p.tasks <- func() { g.pmu.Lock(); g.issue(o); g.pmu.Unlock() }:
	case <-g.p.quit:
		o.result = g.opError(o, distributed.ErrClosed)
		o.finish()
	}
	return o
}

// issue starts o. Every op joins inflight, failed ones too, so that
// Works complete in issue order. The caller holds g.pmu.
func (g *mpiGroup) issue(o *mpiOp) {
	switch {
	case g.broken != nil:
		o.result = g.opError(o, g.broken)
	case o.err != nil:
		o.result = g.fail(o, o.err)
	case o.ctx.Err() != nil:
		o.result = g.fail(o, o.ctx.Err())
	default:
		if code := o.start(o); code != libmpi.Success {
			o.result = g.fail(o, g.p.lib.Err(o.fn, code))
		}
	}
	if len(g.inflight) == 0 {
		g.p.amu.Lock()
		g.p.active = append(g.p.active, g)
		g.p.amu.Unlock()
		select {
		case g.p.wake <- struct{}{}:
		default:
		}
	}
	g.inflight = append(g.inflight, o)
}

// Argument checks, as the native backend makes them.

func (g *mpiGroup) checkBufs(op string, bufs ...distributed.Buffer) error {
	if err := distributed.CheckDTypes(op, bufs...); err != nil {
		return err
	}
	for _, b := range bufs {
		if b.Len() > math.MaxInt32 {
			return fmt.Errorf("distributed: %s: %d elements exceed MPI's 32-bit counts", op, b.Len())
		}
	}
	return nil
}

func (g *mpiGroup) checkPeer(op string, peer, tag int) error {
	switch {
	case peer < 0 || peer >= g.size:
		return fmt.Errorf("distributed: %s: rank %d out of range [0, %d)", op, peer, g.size)
	case peer == g.rank:
		return fmt.Errorf("distributed: %s: rank %d to itself", op, peer)
	case tag < 0 || tag > g.tagUB:
		return fmt.Errorf("distributed: %s: tag %d out of range [0, %d] (MPI_TAG_UB)", op, tag, g.tagUB)
	}
	return nil
}

// dtype is the MPI datatype of b's elements; 16-bit floats travel as
// MPI_UINT16_T (MPI has no bfloat16 or float16), which serves every op
// that moves data without reducing it.
func (g *mpiGroup) dtype(d distributed.DType) libmpi.Handle {
	h := &g.p.lib.Handles
	switch d {
	case distributed.Float32:
		return h.Float
	case distributed.Float64:
		return h.Double
	case distributed.Int64:
		return h.Int64
	}
	return h.Uint16
}

func (g *mpiGroup) reduceOp(r distributed.ReduceOp) libmpi.Handle {
	h := &g.p.lib.Handles
	switch r {
	case distributed.Max:
		return h.Max
	case distributed.Min:
		return h.Min
	case distributed.Prod:
		return h.Prod
	}
	return h.Sum // Sum, and Avg before its division
}

// data returns the address of b's first element (nil when empty) and pins
// it for the op's lifetime: MPI keeps the address until the op completes.
func (o *mpiOp) data(b distributed.Buffer) unsafe.Pointer {
	p := b.Bytes()
	if len(p) == 0 {
		return nil
	}
	o.pin.Pin(&p[0])
	return unsafe.Pointer(&p[0])
}

func isHalf(d distributed.DType) bool { return d == distributed.BFloat16 || d == distributed.Float16 }

// widen returns a float32 copy of a 16-bit buffer's values: MPI reduces
// bfloat16 and float16 as float32, and narrow rounds the result back
// (round to nearest even, as the native backend's kernels).
func widen(b distributed.Buffer) []float32 {
	load := distributed.FP16ToFloat32
	if b.DType == distributed.BFloat16 {
		load = distributed.BF16ToFloat32
	}
	f := make([]float32, b.Len())
	for i, v := range b.Uint16s() {
		f[i] = load(v)
	}
	return f
}

func narrow(dst distributed.Buffer, f []float32) {
	store := distributed.FP16FromFloat32
	if dst.DType == distributed.BFloat16 {
		store = distributed.BF16FromFloat32
	}
	for i, v := range f {
		dst.Uint16s()[i] = store(v)
	}
}

// divide finishes an Avg: Sum divided by the number of ranks, truncating
// for Int64.
func divide(b distributed.Buffer, n int) {
	switch b.DType {
	case distributed.Float32:
		s := b.Float32s()
		for i := range s {
			s[i] /= float32(n)
		}
	case distributed.Float64:
		s := b.Float64s()
		for i := range s {
			s[i] /= float64(n)
		}
	case distributed.Int64:
		s := b.Int64s()
		for i := range s {
			s[i] /= int64(n)
		}
	}
}

// reduction wires a reducing op: for 16-bit floats through float32
// copies, and Avg by a division afterwards. run starts the MPI call on
// (in, out) buffers of MPI datatype dt; result is the buffer that holds
// this rank's result (zero Buffer: none, as on a non-root of Reduce).
func (g *mpiGroup) reduction(o *mpiOp, op distributed.ReduceOp, in, out, result distributed.Buffer, run func(o *mpiOp, in, out unsafe.Pointer, dt libmpi.Handle) int32) {
	if o.err != nil {
		return
	}
	if !isHalf(in.DType) {
		o.start = func(o *mpiOp) int32 { return run(o, o.data(in), o.data(out), g.dtype(in.DType)) }
		if op == distributed.Avg && result.Len() > 0 {
			o.post = func(*mpiOp) error { divide(result, g.size); return nil }
		}
		return
	}
	var fin, fout []float32
	o.start = func(o *mpiOp) int32 {
		fin = widen(in)
		fout = fin
		if out.Uint16s() != nil && unsafe.SliceData(out.Uint16s()) != unsafe.SliceData(in.Uint16s()) {
			fout = make([]float32, out.Len())
		}
		return run(o, o.data(distributed.F32(fin)), o.data(distributed.F32(fout)), g.p.lib.Float)
	}
	o.post = func(*mpiOp) error {
		if result.Len() > 0 {
			if op == distributed.Avg {
				divide(distributed.F32(fout), g.size)
			}
			narrow(result, fout)
		}
		return nil
	}
}

// startOp submits an op of kind, which MPI function fn starts (start; see
// mpiOp), or which fails with err if that is not nil.
func (g *mpiGroup) startOp(ctx context.Context, kind collective.Kind, fn string, err error, start func(o *mpiOp) int32) distributed.Work {
	return g.submit(ctx, &mpiOp{kind: kind, fn: fn, err: err, start: start})
}

func (g *mpiGroup) AllReduce(ctx context.Context, buf distributed.Buffer, op distributed.ReduceOp) distributed.Work {
	o := &mpiOp{kind: collective.AllReduce, fn: "MPI_Iallreduce", err: firstErr(g.checkBufs("allreduce", buf), distributed.CheckReduceOp("allreduce", op))}
	n := buf.Len()
	g.reduction(o, op, buf, buf, buf, func(o *mpiOp, _, p unsafe.Pointer, dt libmpi.Handle) int32 {
		return g.p.lib.Iallreduce(p, n, dt, g.reduceOp(op), g.comm, &o.r.Req)
	})
	return g.submit(ctx, o)
}

func (g *mpiGroup) Broadcast(ctx context.Context, buf distributed.Buffer, root int) distributed.Work {
	return g.startOp(ctx, collective.Broadcast, "MPI_Ibcast", firstErr(g.checkBufs("broadcast", buf), distributed.CheckRoot("broadcast", root, g.size)), func(o *mpiOp) int32 {
		return g.p.lib.Ibcast(o.data(buf), buf.Len(), g.dtype(buf.DType), root, g.comm, &o.r.Req)
	})
}

func (g *mpiGroup) Reduce(ctx context.Context, buf distributed.Buffer, root int, op distributed.ReduceOp) distributed.Work {
	o := &mpiOp{kind: collective.Reduce, fn: "MPI_Ireduce",
		err: firstErr(g.checkBufs("reduce", buf), distributed.CheckReduceOp("reduce", op), distributed.CheckRoot("reduce", root, g.size))}
	var result distributed.Buffer
	if g.rank == root {
		result = buf
	}
	n := buf.Len()
	g.reduction(o, op, buf, buf, result, func(o *mpiOp, _, p unsafe.Pointer, dt libmpi.Handle) int32 {
		return g.p.lib.Ireduce(p, n, dt, g.reduceOp(op), root, g.rank, g.comm, &o.r.Req)
	})
	return g.submit(ctx, o)
}

func (g *mpiGroup) AllGather(ctx context.Context, out, in distributed.Buffer) distributed.Work {
	err := g.checkBufs("allgather", out, in)
	if err == nil {
		err = distributed.CheckParts("allgather", g.size, out, "output", in, "input")
	}
	inPlace := false
	if err == nil {
		inPlace, err = distributed.AllGatherInPlace(out, in, g.rank)
	}
	o := &mpiOp{kind: collective.AllGather, fn: "MPI_Iallgather", err: err}
	o.start = func(o *mpiOp) int32 {
		src := o.data(in)
		if inPlace {
			src = nil // MPI_IN_PLACE: MPI may not be given aliased buffers
		}
		return g.p.lib.Iallgather(src, o.data(out), in.Len(), g.dtype(in.DType), g.comm, &o.r.Req)
	}
	return g.submit(ctx, o)
}

func (g *mpiGroup) ReduceScatter(ctx context.Context, out, in distributed.Buffer, op distributed.ReduceOp) distributed.Work {
	err := firstErr(g.checkBufs("reducescatter", out, in), distributed.CheckReduceOp("reducescatter", op))
	if err == nil {
		err = distributed.CheckParts("reducescatter", g.size, in, "input", out, "output")
	}
	o := &mpiOp{kind: collective.ReduceScatter, fn: "MPI_Ireduce_scatter_block", err: err}
	n := out.Len()
	g.reduction(o, op, in, out, out, func(o *mpiOp, pin, pout unsafe.Pointer, dt libmpi.Handle) int32 {
		return g.p.lib.IreduceScatterBlock(pin, pout, n, dt, g.reduceOp(op), g.comm, &o.r.Req)
	})
	return g.submit(ctx, o)
}

func (g *mpiGroup) AllToAll(ctx context.Context, out, in distributed.Buffer) distributed.Work {
	err := g.checkBufs("alltoall", out, in)
	if err == nil {
		err = distributed.CheckSplit("alltoall", out, in, g.size)
	}
	return g.startOp(ctx, collective.AllToAll, "MPI_Ialltoall", err, func(o *mpiOp) int32 {
		return g.p.lib.Ialltoall(o.data(in), o.data(out), in.Len()/g.size, g.dtype(in.DType), g.comm, &o.r.Req)
	})
}

func (g *mpiGroup) Gather(ctx context.Context, out, in distributed.Buffer, root int) distributed.Work {
	out, err := distributed.CheckRooted("gather", root, g.rank, g.size, out, in, true, g.checkBufs)
	return g.startOp(ctx, collective.Gather, "MPI_Igather", err, func(o *mpiOp) int32 {
		return g.p.lib.Igather(o.data(in), o.data(out), in.Len(), g.dtype(in.DType), root, g.comm, &o.r.Req)
	})
}

func (g *mpiGroup) Scatter(ctx context.Context, out, in distributed.Buffer, root int) distributed.Work {
	in, err := distributed.CheckRooted("scatter", root, g.rank, g.size, out, in, false, g.checkBufs)
	return g.startOp(ctx, collective.Scatter, "MPI_Iscatter", err, func(o *mpiOp) int32 {
		return g.p.lib.Iscatter(o.data(in), o.data(out), out.Len(), g.dtype(out.DType), root, g.comm, &o.r.Req)
	})
}

// Send and Recv are MPI point-to-point messages with the given tag. Unlike
// the native backend's, a Recv does not hold back later ops of the group:
// MPI matches it whenever the message comes, and only its Work (and the
// Works after it) wait.
func (g *mpiGroup) Send(ctx context.Context, buf distributed.Buffer, to int, tag int) distributed.Work {
	return g.startOp(ctx, collective.Send, "MPI_Isend", firstErr(g.checkBufs("send", buf), g.checkPeer("send", to, tag)), func(o *mpiOp) int32 {
		return g.p.lib.Isend(o.data(buf), buf.Len(), g.dtype(buf.DType), to, tag, g.comm, &o.r.Req)
	})
}

func (g *mpiGroup) Recv(ctx context.Context, buf distributed.Buffer, from int, tag int) distributed.Work {
	o := &mpiOp{kind: collective.Recv, fn: "MPI_Irecv", err: firstErr(g.checkBufs("recv", buf), g.checkPeer("recv", from, tag))}
	o.start = func(o *mpiOp) int32 {
		return g.p.lib.Irecv(o.data(buf), buf.Len(), g.dtype(buf.DType), from, tag, g.comm, &o.r.Req)
	}
	o.post = func(o *mpiOp) error {
		n, err := g.p.lib.GetCount(&o.r.St, g.dtype(buf.DType))
		if err != nil {
			return err
		}
		if n != buf.Len() {
			return fmt.Errorf("distributed: recv from rank %d tag %d: message has %d elements, want %d", from, tag, n, buf.Len())
		}
		return nil
	}
	return g.submit(ctx, o)
}

func (g *mpiGroup) Barrier(ctx context.Context) distributed.Work {
	return g.startOp(ctx, collective.Barrier, "MPI_Ibarrier", nil, func(o *mpiOp) int32 { return g.p.lib.Ibarrier(g.comm, &o.r.Req) })
}

// NewGroup forms a subgroup with MPI_Comm_split: a collective call over g
// that every rank of g makes in the same order relative to g's other ops.
func (g *mpiGroup) NewGroup(ctx context.Context, ranks []int) (distributed.ProcessGroup, error) {
	if len(ranks) == 0 {
		return nil, fmt.Errorf("distributed: NewGroup: empty rank list")
	}
	seen := make(map[int]bool, len(ranks))
	key := -1
	for i, r := range ranks {
		if r < 0 || r >= g.size {
			return nil, fmt.Errorf("distributed: NewGroup: rank %d out of range [0, %d)", r, g.size)
		}
		if seen[r] {
			return nil, fmt.Errorf("distributed: NewGroup: rank %d listed twice", r)
		}
		seen[r] = true
		if r == g.rank {
			key = i
		}
	}
	g.mu.Lock()
	closed := g.closed
	g.mu.Unlock()
	if closed {
		return nil, fmt.Errorf("distributed: NewGroup: %w", distributed.ErrClosed)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("distributed: NewGroup: %w", err)
	}
	color := 0
	if key < 0 {
		color = libmpi.Undefined
	}
	child := &mpiGroup{p: g.p, parent: g, me: g.me}
	err := g.p.do(func() error {
		g.pmu.Lock()
		broken := g.broken
		g.pmu.Unlock()
		if broken != nil {
			return broken
		}
		l := g.p.lib
		c, err := l.CommSplit(g.comm, color, key)
		if err != nil || key < 0 {
			return err
		}
		return child.adopt(c)
	})
	if err != nil {
		return nil, fmt.Errorf("distributed: NewGroup: %w", err)
	}
	if key < 0 {
		return nil, nil
	}
	g.mu.Lock()
	g.children = append(g.children, child)
	g.mu.Unlock()
	return child, nil
}

// Close waits for the ops MPI is running (MPI cannot cancel them), frees
// the communicator and closes the subgroups; ops issued after it fail
// with ErrClosed. Closing the last world group finalises MPI.
func (g *mpiGroup) Close() error {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return nil
	}
	g.closed = true
	children, last := g.children, g.last
	g.mu.Unlock()
	var errs []error
	for _, c := range children {
		errs = append(errs, c.Close())
	}
	if last != nil {
		<-last.done // ops complete in issue order: every op is done
	}
	errs = append(errs, g.p.do(func() error { return g.p.lib.CommFree(g.comm) }))
	if g.world {
		errs = append(errs, g.p.release())
	}
	if g.closeStore != nil {
		errs = append(errs, g.closeStore())
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("distributed: Close: backend mpi: %w", err)
	}
	return nil
}

// release drops a world group; the last one finalises MPI and ends the
// MPI goroutine.
func (p *mpiProc) release() error {
	p.mu.Lock()
	p.worlds--
	last := p.worlds == 0
	p.mu.Unlock()
	if !last {
		return nil
	}
	mpiProcess.Lock()
	defer mpiProcess.Unlock()
	err := p.do(func() error { p.stopped = true; return p.lib.Finalize() })
	<-p.quit
	mpiProcess.p, mpiProcess.finalized = nil, true
	return err
}

func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
