package collective

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/cohortml/cohort/distributed/transport"
	"github.com/cohortml/cohort/distributed/transport/inproc"
)

// vals is one rank's typed data, held as float64 (all test values are small
// integers, exact in every dtype) and converted on the way in and out.
type vals []float64

func encode(dt DType, v vals) []byte {
	p := make([]byte, len(v)*dt.Size())
	switch dt {
	case Float32:
		s := view[float32](p)
		for i, x := range v {
			s[i] = float32(x)
		}
	case Float64:
		copy(view[float64](p), v)
	case Int64:
		s := view[int64](p)
		for i, x := range v {
			s[i] = int64(x)
		}
	case BFloat16:
		s := view[uint16](p)
		for i, x := range v {
			s[i] = BF16FromFloat32(float32(x))
		}
	case Float16:
		s := view[uint16](p)
		for i, x := range v {
			s[i] = FP16FromFloat32(float32(x))
		}
	}
	return p
}

func decode(dt DType, p []byte) vals {
	v := make(vals, len(p)/dt.Size())
	switch dt {
	case Float32:
		for i, x := range view[float32](p) {
			v[i] = float64(x)
		}
	case Float64:
		copy(v, view[float64](p))
	case Int64:
		for i, x := range view[int64](p) {
			v[i] = float64(x)
		}
	case BFloat16:
		for i, x := range view[uint16](p) {
			v[i] = float64(BF16ToFloat32(x))
		}
	case Float16:
		for i, x := range view[uint16](p) {
			v[i] = float64(FP16ToFloat32(x))
		}
	}
	return v
}

// input is rank r's element i: a small integer in [−2, 2], so that sums and
// products over up to 8 ranks are exact in every dtype (products are 0 or
// ±2^k ≤ 256).
func input(r, i int) float64 { return float64((r*7+i*3+r*i)%5 - 2) }

// combine folds values in rank order the way the reference defines each op.
func combine(dt DType, op Op, xs []float64) float64 {
	acc := xs[0]
	for _, x := range xs[1:] {
		switch op {
		case Sum, Avg:
			acc += x
		case Prod:
			acc *= x
		case Max:
			acc = math.Max(acc, x)
		case Min:
			acc = math.Min(acc, x)
		}
	}
	if op == Avg {
		n := len(xs)
		switch dt {
		case Int64:
			acc = float64(int64(acc) / int64(n))
		case Float64:
			acc /= float64(n)
		case Float32:
			acc = float64(float32(acc) / float32(n))
		case BFloat16:
			acc = float64(BF16ToFloat32(BF16FromFloat32(float32(acc) / float32(n))))
		case Float16:
			acc = float64(FP16ToFloat32(FP16FromFloat32(float32(acc) / float32(n))))
		}
	}
	return acc
}

// reference returns what every rank's output must be for call c.
func reference(c Call, size, rank int) vals {
	n := c.Count
	red := func(idx int) float64 {
		xs := make([]float64, size)
		for r := range xs {
			xs[r] = input(r, idx)
		}
		return combine(c.DType, c.Op, xs)
	}
	out := make(vals, c.OutLen(size))
	for i := range out {
		switch c.Kind {
		case AllReduce:
			out[i] = red(i)
		case Broadcast:
			out[i] = input(c.Root, i)
		case Reduce:
			if rank == c.Root {
				out[i] = red(i)
			} else {
				out[i] = input(rank, i)
			}
		case AllGather:
			out[i] = input(i/n, i%n)
		case ReduceScatter:
			out[i] = red(rank*n + i)
		case AllToAll:
			out[i] = input(i/n, rank*n+i%n)
		case Gather:
			if rank == c.Root {
				out[i] = input(i/n, i%n)
			}
		case Scatter:
			out[i] = input(c.Root, rank*n+i)
		}
	}
	return out
}

// buffers returns rank's input and output for call c.
func buffers(c Call, size, rank int) (in, out []byte) {
	iv := make(vals, c.InLen(size))
	for i := range iv {
		iv[i] = input(rank, i)
	}
	ov := make(vals, c.OutLen(size))
	if c.Kind == AllReduce || c.Kind == Broadcast || c.Kind == Reduce {
		for i := range ov {
			ov[i] = input(rank, i)
		}
	}
	if c.Kind == Gather && rank != c.Root {
		ov = nil
	}
	return encode(c.DType, iv), encode(c.DType, ov)
}

type rankRun struct {
	plan    func(rank int) (*Plan, error)
	in, out func(rank int) []byte
	// wrap, when set, puts a transport in front of each rank's.
	wrap func(rank int, t transport.Transport) transport.Transport
}

// runRanks runs one op on every rank of an inproc mesh, one goroutine
// each, and returns each rank's error.
func runRanks(t *testing.T, size int, seq uint64, mesh []*inproc.Transport, rr rankRun) []error {
	t.Helper()
	errs := make([]error, size)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for r := range size {
		wg.Go(func() {
			ranks := make([]int, size)
			for i := range ranks {
				ranks[i] = i
			}
			var tr transport.Transport = mesh[r]
			if rr.wrap != nil {
				tr = rr.wrap(r, tr)
			}
			e, err := NewExecutor(tr, 7, ranks)
			if err != nil {
				errs[r] = err
				return
			}
			defer e.Close()
			p, err := rr.plan(r)
			if err != nil {
				errs[r] = err
				return
			}
			errs[r] = e.Run(ctx, seq, p, rr.in(r), rr.out(r))
		})
	}
	wg.Wait()
	return errs
}

func closeMesh(mesh []*inproc.Transport) {
	for _, m := range mesh {
		m.Close()
	}
}

// checkCall runs call c with algorithm algo on size ranks and compares
// every rank's output with the reference.
func checkCall(t *testing.T, c Call, size int, algo string, tun Tuning) {
	t.Helper()
	checkCallVia(t, c, size, algo, tun, nil)
}

// checkCallVia is checkCall with each rank's transport wrapped by wrap
// (nil: none).
func checkCallVia(t *testing.T, c Call, size int, algo string, tun Tuning, wrap func(int, transport.Transport) transport.Transport) {
	t.Helper()
	mesh := inproc.NewMesh(size)
	defer closeMesh(mesh)
	ins, outs := make([][]byte, size), make([][]byte, size)
	for r := range size {
		ins[r], outs[r] = buffers(c, size, r)
	}
	errs := runRanks(t, size, 1, mesh, rankRun{
		plan: func(r int) (*Plan, error) { return NewPlan(c, size, r, algo, tun) },
		in:   func(r int) []byte { return ins[r] },
		out:  func(r int) []byte { return outs[r] },
		wrap: wrap,
	})
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	for r := range size {
		if c.Kind == Gather && r != c.Root {
			continue
		}
		got, want := decode(c.DType, outs[r]), reference(c, size, r)
		for i := range want {
			if got[i] != want[i] && !(math.IsNaN(got[i]) && math.IsNaN(want[i])) {
				t.Fatalf("rank %d: out[%d] = %v, want %v", r, i, got[i], want[i])
			}
		}
		if in := decode(c.DType, ins[r]); len(in) > 0 {
			for i := range in {
				if in[i] != input(r, i) {
					t.Fatalf("rank %d: input[%d] changed to %v", r, i, in[i])
				}
			}
		}
	}
}

var (
	testWorlds = []int{1, 2, 3, 4, 7, 8}
	allDTypes  = []DType{Float32, Float64, Int64, BFloat16, Float16}
	allOps     = []Op{Sum, Avg, Max, Min, Prod}
	dataKinds  = []Kind{AllReduce, Broadcast, Reduce, AllGather, ReduceScatter, AllToAll, Gather, Scatter}
)

// TestExecutorGrid checks every algorithm of every kind, every dtype and
// (for reductions) every op, over worlds {1,2,3,4,7,8} and counts
// {0, 1, world−1, 1000}; again with tiny pipeline segments for two dtypes
// and two ops.
func TestExecutorGrid(t *testing.T) {
	tunings := []struct {
		name string
		t    Tuning
	}{{"default", Tuning{}}, {"seg", Tuning{SegmentBytes: 64, Depth: 2}}}
	for _, kind := range dataKinds {
		for _, algo := range Algorithms(kind) {
			t.Run(kind.String()+"/"+algo, func(t *testing.T) {
				t.Parallel()
				for _, size := range testWorlds {
					for _, count := range []int{0, 1, size - 1, 1000} {
						for _, dt := range allDTypes {
							ops := []Op{Sum}
							if kind.reduces() {
								ops = allOps
							}
							for _, op := range ops {
								for _, tun := range tunings {
									if tun.name == "seg" && (dt != Float32 && dt != BFloat16 || op != Sum && op != Max) {
										continue // pipelining does not depend on the dtype or op
									}
									root := 0
									if kind.rooted() {
										root = size - 1
									}
									c := Call{Kind: kind, DType: dt, Op: op, Count: count, Root: root}
									name := fmt.Sprintf("world=%d/n=%d/%v/%v/%s", size, count, dt, op, tun.name)
									ok := t.Run(name, func(t *testing.T) { checkCall(t, c, size, algo, tun.t) })
									if !ok {
										return
									}
								}
							}
						}
					}
				}
			})
		}
	}
}

// TestExecutorLarge runs the big count 2^20+3 for each algorithm with Sum
// on float32 (the DDP case), on worlds 2 and 3 (and 8 for all-reduce).
func TestExecutorLarge(t *testing.T) {
	if testing.Short() {
		t.Skip("large counts skipped in -short mode")
	}
	const count = 1<<20 + 3
	for _, kind := range dataKinds {
		for _, algo := range Algorithms(kind) {
			worlds := []int{2, 3}
			if kind == AllReduce {
				worlds = []int{2, 3, 8}
			}
			for _, size := range worlds {
				n := count
				if kind == AllGather || kind == ReduceScatter || kind == AllToAll || kind == Gather || kind == Scatter {
					n = count / size
				}
				c := Call{Kind: kind, DType: Float32, Op: Sum, Count: n, Root: 1}
				t.Run(fmt.Sprintf("%v/%s/world=%d/n=%d", kind, algo, size, n), func(t *testing.T) {
					checkCall(t, c, size, algo, Tuning{})
				})
			}
		}
	}
}

func TestExecutorBarrier(t *testing.T) {
	for _, size := range testWorlds {
		t.Run(fmt.Sprintf("world=%d", size), func(t *testing.T) {
			mesh := inproc.NewMesh(size)
			defer closeMesh(mesh)
			for seq := uint64(1); seq <= 3; seq++ {
				errs := runRanks(t, size, seq, mesh, rankRun{
					plan: func(r int) (*Plan, error) { return NewPlan(Call{Kind: Barrier}, size, r, "", Tuning{}) },
					in:   func(int) []byte { return nil },
					out:  func(int) []byte { return nil },
				})
				for r, err := range errs {
					if err != nil {
						t.Fatalf("seq %d rank %d: %v", seq, r, err)
					}
				}
			}
		})
	}
}

// TestExecutorBarrierWaits checks that no rank leaves a barrier before the
// last one enters: the late rank sets a flag just before entering.
func TestExecutorBarrierWaits(t *testing.T) {
	const size = 5
	mesh := inproc.NewMesh(size)
	defer closeMesh(mesh)
	var entered sync.WaitGroup
	entered.Add(size - 1)
	var late sync.Mutex
	lateIn := false
	errs := make([]error, size)
	var wg sync.WaitGroup
	for r := range size {
		wg.Go(func() {
			e, _ := NewExecutor(mesh[r], 0, []int{0, 1, 2, 3, 4})
			defer e.Close()
			p, _ := NewPlan(Call{Kind: Barrier}, size, r, "", Tuning{})
			if r == 3 {
				entered.Wait() // everyone else is already inside
				late.Lock()
				lateIn = true
				late.Unlock()
			} else {
				entered.Done()
			}
			errs[r] = e.Run(context.Background(), 1, p, nil, nil)
			late.Lock()
			defer late.Unlock()
			if !lateIn {
				errs[r] = fmt.Errorf("rank %d left the barrier before rank 3 entered", r)
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}

func TestExecutorSendRecv(t *testing.T) {
	for _, tc := range []struct{ size, from, to, count int }{{2, 0, 1, 0}, {2, 1, 0, 7}, {5, 4, 2, 1000}} {
		t.Run(fmt.Sprintf("world=%d/%d->%d/n=%d", tc.size, tc.from, tc.to, tc.count), func(t *testing.T) {
			mesh := inproc.NewMesh(tc.size)
			defer closeMesh(mesh)
			src := make(vals, tc.count)
			for i := range src {
				src[i] = float64(i%7) - 3
			}
			sendBuf, recvBuf := encode(Float64, src), make([]byte, tc.count*8)
			var wg sync.WaitGroup
			errs := make([]error, 2)
			ranks := make([]int, tc.size)
			for i := range ranks {
				ranks[i] = i
			}
			for side, r := range []int{tc.from, tc.to} {
				wg.Go(func() {
					e, _ := NewExecutor(mesh[r], 0, ranks)
					defer e.Close()
					c := Call{Kind: Send, DType: Float64, Count: tc.count, Peer: tc.to, Tag: 3}
					buf := sendBuf
					if side == 1 {
						c.Kind, c.Peer, buf = Recv, tc.from, recvBuf
					}
					p, err := NewPlan(c, tc.size, r, "", Tuning{})
					if err == nil {
						err = e.Run(context.Background(), 9, p, nil, buf)
					}
					errs[side] = err
				})
			}
			wg.Wait()
			if err := errors.Join(errs...); err != nil {
				t.Fatal(err)
			}
			if got := decode(Float64, recvBuf); fmt.Sprint(got) != fmt.Sprint(src) {
				t.Fatalf("received %v, want %v", got, src)
			}
		})
	}
}

// TestExecutorSubgroup runs an all-reduce on ranks {3, 1, 4} of a mesh of
// 6 while ranks {0, 2, 5} run one of their own with another group number.
func TestExecutorSubgroup(t *testing.T) {
	mesh := inproc.NewMesh(6)
	defer closeMesh(mesh)
	groups := [][]int{{3, 1, 4}, {0, 2, 5}}
	var wg sync.WaitGroup
	results := make([][]float64, 6)
	errs := make([]error, 6)
	for gi, members := range groups {
		for g, tr := range members {
			wg.Go(func() {
				e, err := NewExecutor(mesh[tr], uint32(gi+1), members)
				if err != nil {
					errs[tr] = err
					return
				}
				defer e.Close()
				buf := []float64{float64(tr), 1}
				p, _ := NewPlan(Call{Kind: AllReduce, DType: Float64, Count: 2}, 3, g, "", Tuning{})
				errs[tr] = e.Run(context.Background(), 1, p, nil, bytesOf(buf))
				results[tr] = buf
			})
		}
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	for gi, members := range groups {
		sum := 0.0
		for _, tr := range members {
			sum += float64(tr)
		}
		for _, tr := range members {
			if want := []float64{sum, 3}; fmt.Sprint(results[tr]) != fmt.Sprint(want) {
				t.Errorf("group %d rank %d: %v, want %v", gi, tr, results[tr], want)
			}
		}
	}
}

func bytesOf[T any](s []T) []byte {
	if len(s) == 0 {
		return nil
	}
	var z T
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), len(s)*int(unsafe.Sizeof(z)))
}

// TestExecutorDesync: ranks that issue different calls at the same seq get
// a *DesyncError naming both ranks and both calls, and nobody hangs.
func TestExecutorDesync(t *testing.T) {
	cases := []struct {
		name  string
		size  int
		calls func(r int) Call
	}{
		{"kind", 2, func(r int) Call {
			if r == 1 {
				return Call{Kind: Broadcast, DType: Float32, Count: 8, Root: 0}
			}
			return Call{Kind: AllReduce, DType: Float32, Count: 8}
		}},
		{"count", 4, func(r int) Call {
			return Call{Kind: AllReduce, DType: Float32, Count: 8 + 8*b2i(r == 2)}
		}},
		{"dtype", 3, func(r int) Call {
			c := Call{Kind: AllGather, DType: Float32, Count: 4}
			if r == 0 {
				c.DType = Float64
			}
			return c
		}},
		{"root", 3, func(r int) Call { return Call{Kind: Broadcast, DType: Int64, Count: 4, Root: b2i(r == 1)} }},
		{"op", 2, func(r int) Call { return Call{Kind: AllReduce, DType: Int64, Count: 4, Op: Op(r * 2)} }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			mesh := inproc.NewMesh(tc.size)
			defer closeMesh(mesh)
			errs := make([]error, tc.size)
			var wg sync.WaitGroup
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			for r := range tc.size {
				wg.Go(func() {
					ranks := make([]int, tc.size)
					for i := range ranks {
						ranks[i] = i
					}
					e, _ := NewExecutor(mesh[r], 0, ranks)
					defer e.Close()
					c := tc.calls(r)
					p, err := NewPlan(c, tc.size, r, "", Tuning{})
					if err != nil {
						errs[r] = err
						return
					}
					in, out := buffers(c, tc.size, r)
					errs[r] = e.Run(ctx, 5, p, in, out)
					if errs[r] != nil {
						// Like the native backend: a failed op takes the rank down.
						mesh[r].Close()
					}
				})
			}
			wg.Wait()
			// A rank whose neighbours agree with it (a broadcast root, say)
			// may finish; the native backend then fails its next op.
			found := false
			for r, err := range errs {
				if err == nil {
					continue
				}
				var de *DesyncError
				if errors.As(err, &de) {
					found = true
					if (de.PeerCall != nil && de.Call == *de.PeerCall) || de.Rank == de.Peer || de.Seq != 5 {
						t.Errorf("rank %d: odd desync error %+v", r, de)
					}
					t.Logf("rank %d: %v", r, err)
				} else if errors.Is(err, context.DeadlineExceeded) {
					t.Errorf("rank %d: timed out instead of failing fast: %v", r, err)
				}
			}
			if !found {
				t.Fatalf("no rank reported a desync: %v", errs)
			}
		})
	}
}

// eachRank runs fn for the first ranks ranks of an inproc mesh of size,
// each in its own goroutine, all within timeout, and returns their
// errors once all have returned; the mesh is closed then.
func eachRank(size, ranks int, timeout time.Duration, fn func(ctx context.Context, mesh []*inproc.Transport, r int) error) []error {
	mesh := inproc.NewMesh(size)
	defer closeMesh(mesh)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	errs := make([]error, size)
	var wg sync.WaitGroup
	for r := range ranks {
		wg.Go(func() { errs[r] = fn(ctx, mesh, r) })
	}
	wg.Wait()
	return errs
}

// TestExecutorPeerDeath kills one rank mid all-reduce: the others fail
// promptly with an error naming it.
func TestExecutorPeerDeath(t *testing.T) {
	const size = 4
	start := time.Now()
	errs := eachRank(size, size, 10*time.Second, func(ctx context.Context, mesh []*inproc.Transport, r int) error {
		e, _ := NewExecutor(mesh[r], 0, []int{0, 1, 2, 3})
		defer e.Close()
		p, _ := NewPlan(Call{Kind: AllReduce, DType: Float32, Count: 1 << 16}, size, r, "ring", Tuning{SegmentBytes: 1024})
		if r == 2 {
			mesh[2].Kill()
			return nil
		}
		err := e.Run(ctx, 1, p, nil, make([]byte, 4<<16))
		if err != nil {
			mesh[r].Close() // as the native backend does on abort
		}
		return err
	})
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("survivors took %v to fail", d)
	}
	named := 0
	for r, err := range errs {
		if r == 2 {
			continue
		}
		var pe *transport.PeerError
		var se *StepError
		if !errors.As(err, &se) || !errors.As(err, &pe) || se.Peer != pe.Peer {
			t.Errorf("rank %d: got %v, want a *StepError wrapping a *transport.PeerError", r, err)
			continue
		}
		if pe.Peer == 2 {
			named++
		}
		t.Logf("rank %d: %v", r, err)
	}
	if named == 0 {
		t.Error("no survivor named rank 2")
	}
}

// TestExecutorTimeoutNamesLateRank: a rank that never starts the op is
// named in the error of the ranks waiting for it.
func TestExecutorTimeoutNamesLateRank(t *testing.T) {
	const size = 3
	errs := eachRank(size, size-1, 200*time.Millisecond, func(ctx context.Context, mesh []*inproc.Transport, r int) error {
		e, _ := NewExecutor(mesh[r], 0, []int{0, 1, 2})
		defer e.Close()
		p, _ := NewPlan(Call{Kind: AllReduce, DType: Float32, Count: 10}, size, r, "", Tuning{})
		return e.Run(ctx, 4, p, nil, make([]byte, 40))
	})
	var se *StepError
	if !errors.As(errs[0], &se) || se.Peer != 2 || !errors.Is(errs[0], context.DeadlineExceeded) {
		t.Fatalf("rank 0: %v, want a deadline error naming rank 2", errs[0])
	}
	t.Log(errs[0])
}

// TestExecutorLocalCancelBlamesNoPeer: a wait ended by this rank's own
// cancellation (Ctrl-C, SIGTERM) says so and names no peer, for inline and
// goroutine plans alike, even though a peer has not started the op.
func TestExecutorLocalCancelBlamesNoPeer(t *testing.T) {
	for _, tc := range []struct {
		name  string
		count int
	}{{"inline", 10}, {"pipelined", 1 << 16}} {
		t.Run(tc.name, func(t *testing.T) {
			const size = 3
			mesh := inproc.NewMesh(size)
			defer closeMesh(mesh)
			ctx, cancel := context.WithCancel(context.Background())
			time.AfterFunc(50*time.Millisecond, cancel)
			e, _ := NewExecutor(mesh[0], 0, []int{0, 1, 2})
			defer e.Close()
			p, _ := NewPlan(Call{Kind: AllReduce, DType: Float32, Count: tc.count}, size, 0, "ring", Tuning{})
			err := e.Run(ctx, 4, p, nil, make([]byte, 4*tc.count))
			var se *StepError
			switch {
			case !errors.As(err, &se) || !errors.Is(err, context.Canceled):
				t.Fatalf("got %v, want a *StepError wrapping context.Canceled", err)
			case se.Peer != -1 || !strings.Contains(err.Error(), "cancelled locally") || strings.Contains(err.Error(), "has not started"):
				t.Fatalf("got %v (peer %d), want \"cancelled locally\" naming no peer", err, se.Peer)
			}
		})
	}
}

func TestExecutorLeaksNoGoroutines(t *testing.T) {
	before := runtime.NumGoroutine()
	checkCall(t, Call{Kind: AllReduce, DType: Float32, Count: 1000}, 4, "ring", Tuning{SegmentBytes: 64})
	deadline := time.Now().Add(2 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		t.Fatalf("%d goroutines before, %d after", before, n)
	}
}

func TestNewExecutorRejectsBadGroups(t *testing.T) {
	mesh := inproc.NewMesh(3)
	defer closeMesh(mesh)
	for name, ranks := range map[string][]int{
		"not a member": {1, 2},
		"duplicate":    {0, 1, 1},
		"out of range": {0, 3},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := NewExecutor(mesh[0], 0, ranks); err == nil {
				t.Fatalf("NewExecutor(%v) succeeded", ranks)
			}
		})
	}
}
