package grouptest

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/cohortml/cohort/distributed"
)

// World runs fn on every rank of a fresh group of world ranks and returns
// when every rank has returned; it skips t when it cannot build a group of
// that size.
type World func(t *testing.T, world int, fn func(t *testing.T, pg distributed.ProcessGroup))

// Config tunes the suite.
type Config struct {
	// Worlds lists the world sizes; nil means {1, 2, 3, 4, 7, 8}.
	Worlds []int
	// LargeCount is the element count of the large all-reduce (float32,
	// sum); 0 means 1<<16 + 3, negative skips it.
	LargeCount int
}

func (c Config) worlds() []int {
	if c.Worlds == nil {
		return []int{1, 2, 3, 4, 7, 8}
	}
	return c.Worlds
}

var (
	dtypes    = []distributed.DType{distributed.Float32, distributed.Float64, distributed.Int64, distributed.BFloat16, distributed.Float16}
	reduceOps = []distributed.ReduceOp{distributed.Sum, distributed.Avg, distributed.Max, distributed.Min, distributed.Prod}
)

// counts are the element counts per rank: none, one, one that no world
// size above 1 divides, and a thousand.
func counts(world int) []int { return []int{0, 1, world + 1, 1000} }

// A case runs on every rank of a fresh group.
type testCase struct {
	name string
	run  func(ctx context.Context, t *testing.T, pg distributed.ProcessGroup, cfg Config)
}

var cases = []testCase{
	{"AllReduce", testAllReduce},
	{"Broadcast", testBroadcast},
	{"Reduce", testReduce},
	{"AllGather", testAllGather},
	{"ReduceScatter", testReduceScatter},
	{"AllToAll", testAllToAll},
	{"Gather", testGather},
	{"Scatter", testScatter},
	{"SendRecv", testSendRecv},
	{"Barrier", func(ctx context.Context, t *testing.T, pg distributed.ProcessGroup, _ Config) {
		for k := range 3 {
			check(t, fmt.Sprintf("barrier %d", k), pg.Barrier(ctx).Wait())
		}
	}},
	{"IssueOrder", testIssueOrder},
	{"Subgroups", testSubgroups},
	{"Errors", testErrors},
}

// Test runs the whole suite: every case at every world size, each on a
// group of its own from w.
func Test(t *testing.T, w World, cfg Config) {
	for _, world := range cfg.worlds() {
		t.Run(fmt.Sprintf("world=%d", world), func(t *testing.T) {
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) {
					w(t, world, func(t *testing.T, pg distributed.ProcessGroup) {
						if pg.Size() != world {
							t.Errorf("Size() = %d, want %d", pg.Size(), world)
							return
						}
						c.run(context.Background(), t, pg, cfg)
					})
				})
			}
		})
	}
}

// each runs one combination of a case, naming it in its failures.
func each(name string, f func(name string)) { f(name) }

func check(t *testing.T, what string, err error) bool {
	t.Helper()
	if err != nil {
		t.Errorf("%s: %v", what, err)
		return false
	}
	return true
}

// value is element i of rank r's input for op: small integers, so that
// sums, maxima and products are exact in every dtype (products of ones
// and twos are powers of two).
func value(op distributed.ReduceOp, r, i int) float64 {
	if op == distributed.Prod {
		return float64(1 + (r+i)%2)
	}
	return float64(1 + (r*7+i*3)%4)
}

// reduced is the reduction of value(op, r, i) over ranks 0..world-1.
func reduced(op distributed.ReduceOp, world, i int, dt distributed.DType) float64 {
	acc := value(op, 0, i)
	for r := 1; r < world; r++ {
		v := value(op, r, i)
		switch op {
		case distributed.Sum, distributed.Avg:
			acc += v
		case distributed.Max:
			acc = max(acc, v)
		case distributed.Min:
			acc = min(acc, v)
		case distributed.Prod:
			acc *= v
		}
	}
	if op == distributed.Avg {
		if dt == distributed.Int64 {
			return float64(int64(acc) / int64(world))
		}
		acc /= float64(world)
	}
	return acc
}

// tolerance is the relative error allowed for dt (one rounding of an Avg).
func tolerance(dt distributed.DType) float64 {
	switch dt {
	case distributed.Float32:
		return 1e-6
	case distributed.BFloat16:
		return 1.0 / 128
	case distributed.Float16:
		return 1.0 / 1024
	}
	return 1e-12
}

// Buffer makes a Buffer of n elements of dt with f(i) as element i
// (rounded to dt).
func Buffer(dt distributed.DType, n int, f func(i int) float64) distributed.Buffer {
	switch dt {
	case distributed.Float32:
		return distributed.F32(fill(n, f, func(x float64) float32 { return float32(x) }))
	case distributed.Float64:
		return distributed.F64(fill(n, f, func(x float64) float64 { return x }))
	case distributed.Int64:
		return distributed.I64(fill(n, f, func(x float64) int64 { return int64(x) }))
	case distributed.BFloat16:
		return distributed.BF16(fill(n, f, func(x float64) uint16 { return distributed.BF16FromFloat32(float32(x)) }))
	default:
		return distributed.FP16(fill(n, f, func(x float64) uint16 { return distributed.FP16FromFloat32(float32(x)) }))
	}
}

// fill returns n elements, element i being conv(f(i)).
func fill[T any](n int, f func(i int) float64, conv func(float64) T) []T {
	s := make([]T, n)
	for i := range s {
		s[i] = conv(f(i))
	}
	return s
}

// At returns element i of b as a float64.
func At(b distributed.Buffer, i int) float64 {
	switch b.DType {
	case distributed.Float32:
		return float64(b.Float32s()[i])
	case distributed.Float64:
		return b.Float64s()[i]
	case distributed.Int64:
		return float64(b.Int64s()[i])
	case distributed.BFloat16:
		return float64(distributed.BF16ToFloat32(b.Uint16s()[i]))
	default:
		return float64(distributed.FP16ToFloat32(b.Uint16s()[i]))
	}
}

// expect checks b against want(i), reporting the first few mismatches.
func expect(t *testing.T, what string, b distributed.Buffer, want func(i int) float64) {
	t.Helper()
	tol := tolerance(b.DType)
	bad := 0
	for i := range b.Len() {
		got, w := At(b, i), want(i)
		if math.Abs(got-w) > tol*math.Max(1, math.Abs(w)) {
			if bad < 3 {
				t.Errorf("%s: element %d = %v, want %v", what, i, got, w)
			}
			bad++
		}
	}
	if bad > 3 {
		t.Errorf("%s: %d of %d elements wrong", what, bad, b.Len())
	}
}

func testAllReduce(ctx context.Context, t *testing.T, pg distributed.ProcessGroup, cfg Config) {
	r, world := pg.Rank(), pg.Size()
	for _, dt := range dtypes {
		for _, op := range reduceOps {
			for _, n := range counts(world) {
				each(fmt.Sprintf("%v/%v/n=%d", dt, op, n), func(name string) {
					b := Buffer(dt, n, func(i int) float64 { return value(op, r, i) })
					if check(t, name+" allreduce", pg.AllReduce(ctx, b, op).Wait()) {
						expect(t, name+" allreduce", b, func(i int) float64 { return reduced(op, world, i, dt) })
					}
				})
			}
		}
	}
	if n := cfg.LargeCount; n >= 0 {
		if n == 0 {
			n = 1<<16 + 3
		}
		each(fmt.Sprintf("float32/sum/n=%d", n), func(name string) {
			b := Buffer(distributed.Float32, n, func(i int) float64 { return value(distributed.Sum, r, i) })
			if check(t, name+" allreduce", pg.AllReduce(ctx, b, distributed.Sum).Wait()) {
				expect(t, name+" allreduce", b, func(i int) float64 { return reduced(distributed.Sum, world, i, distributed.Float32) })
			}
		})
	}
}

func roots(world int) []int {
	if world == 1 {
		return []int{0}
	}
	return []int{0, world - 1}
}

func testBroadcast(ctx context.Context, t *testing.T, pg distributed.ProcessGroup, _ Config) {
	r, world := pg.Rank(), pg.Size()
	for _, dt := range dtypes {
		for _, root := range roots(world) {
			for _, n := range counts(world) {
				each(fmt.Sprintf("%v/root=%d/n=%d", dt, root, n), func(name string) {
					b := Buffer(dt, n, func(i int) float64 { return float64((r*5+i)%9 + 1) })
					if check(t, name+" broadcast", pg.Broadcast(ctx, b, root).Wait()) {
						expect(t, name+" broadcast", b, func(i int) float64 { return float64((root*5+i)%9 + 1) })
					}
				})
			}
		}
	}
}

func testReduce(ctx context.Context, t *testing.T, pg distributed.ProcessGroup, _ Config) {
	r, world := pg.Rank(), pg.Size()
	root := world - 1
	for _, dt := range dtypes {
		for _, op := range reduceOps {
			n := world + 1
			each(fmt.Sprintf("%v/%v/root=%d/n=%d", dt, op, root, n), func(name string) {
				b := Buffer(dt, n, func(i int) float64 { return value(op, r, i) })
				if check(t, name+" reduce", pg.Reduce(ctx, b, root, op).Wait()) && r == root {
					expect(t, name+" reduce", b, func(i int) float64 { return reduced(op, world, i, dt) })
				}
			})
		}
	}
}

func testAllGather(ctx context.Context, t *testing.T, pg distributed.ProcessGroup, _ Config) {
	r, world := pg.Rank(), pg.Size()
	for _, dt := range dtypes {
		for _, n := range counts(world) {
			each(fmt.Sprintf("%v/n=%d", dt, n), func(name string) {
				in := Buffer(dt, n, func(i int) float64 { return float64(r*10 + i%10) })
				out := Buffer(dt, world*n, func(int) float64 { return -1 })
				if check(t, name+" allgather", pg.AllGather(ctx, out, in).Wait()) {
					expect(t, name+" allgather", out, func(i int) float64 { return float64(i/n*10 + i%n%10) })
				}
				// In place: the input is this rank's own chunk of the output.
				out = Buffer(dt, world*n, func(i int) float64 {
					if i/n == r {
						return float64(r*10 + i%n%10)
					}
					return -1
				})
				if check(t, name+" allgather in place", pg.AllGather(ctx, out, out.Slice(r*n, (r+1)*n)).Wait()) {
					expect(t, name+" allgather in place", out, func(i int) float64 { return float64(i/n*10 + i%n%10) })
				}
			})
		}
	}
}

func testReduceScatter(ctx context.Context, t *testing.T, pg distributed.ProcessGroup, _ Config) {
	r, world := pg.Rank(), pg.Size()
	for _, dt := range dtypes {
		for _, op := range []distributed.ReduceOp{distributed.Sum, distributed.Avg, distributed.Max} {
			for _, n := range counts(world) {
				each(fmt.Sprintf("%v/%v/n=%d", dt, op, n), func(name string) {
					in := Buffer(dt, world*n, func(i int) float64 { return value(op, r, i) })
					out := Buffer(dt, n, func(int) float64 { return -1 })
					if check(t, name+" reducescatter", pg.ReduceScatter(ctx, out, in, op).Wait()) {
						expect(t, name+" reducescatter", out, func(i int) float64 { return reduced(op, world, r*n+i, dt) })
					}
				})
			}
		}
	}
}

func testAllToAll(ctx context.Context, t *testing.T, pg distributed.ProcessGroup, _ Config) {
	r, world := pg.Rank(), pg.Size()
	for _, dt := range dtypes {
		for _, chunk := range []int{0, 1, 3, 250} {
			each(fmt.Sprintf("%v/chunk=%d", dt, chunk), func(name string) {
				// Element k of chunk j on rank r encodes (r, j, k).
				in := Buffer(dt, world*chunk, func(i int) float64 { return float64(r*64 + i/chunk*8 + i%chunk%8) })
				out := Buffer(dt, world*chunk, func(int) float64 { return -1 })
				if check(t, name+" alltoall", pg.AllToAll(ctx, out, in).Wait()) {
					expect(t, name+" alltoall", out, func(i int) float64 { return float64(i/chunk*64 + r*8 + i%chunk%8) })
				}
			})
		}
	}
}

// eachRoot runs fn for every dtype and root, n being world+1 elements a
// rank, named "<dtype>/root=<root>/n=<n>".
func eachRoot(world int, fn func(name string, dt distributed.DType, root, n int)) {
	for _, dt := range dtypes {
		for _, root := range roots(world) {
			n := world + 1
			each(fmt.Sprintf("%v/root=%d/n=%d", dt, root, n), func(name string) { fn(name, dt, root, n) })
		}
	}
}

func testGather(ctx context.Context, t *testing.T, pg distributed.ProcessGroup, _ Config) {
	r, world := pg.Rank(), pg.Size()
	eachRoot(world, func(name string, dt distributed.DType, root, n int) {
		in := Buffer(dt, n, func(i int) float64 { return float64(r*10 + i%10) })
		var out distributed.Buffer
		if r == root {
			out = Buffer(dt, world*n, func(int) float64 { return -1 })
		}
		if check(t, name+" gather", pg.Gather(ctx, out, in, root).Wait()) && r == root {
			expect(t, name+" gather", out, func(i int) float64 { return float64(i/n*10 + i%n%10) })
		}
	})
}

func testScatter(ctx context.Context, t *testing.T, pg distributed.ProcessGroup, _ Config) {
	r, world := pg.Rank(), pg.Size()
	eachRoot(world, func(name string, dt distributed.DType, root, n int) {
		var in distributed.Buffer
		if r == root {
			in = Buffer(dt, world*n, func(i int) float64 { return float64(i/n*10 + i%n%10) })
		}
		out := Buffer(dt, n, func(int) float64 { return -1 })
		if check(t, name+" scatter", pg.Scatter(ctx, out, in, root).Wait()) {
			expect(t, name+" scatter", out, func(i int) float64 { return float64(r*10 + i%10) })
		}
	})
}

// testSendRecv passes messages around the ring on two tags and receives
// them in the opposite order to the sends: tags separate the streams.
func testSendRecv(ctx context.Context, t *testing.T, pg distributed.ProcessGroup, _ Config) {
	r, world := pg.Rank(), pg.Size()
	if world == 1 {
		return
	}
	next, prev := (r+1)%world, (r+world-1)%world
	for _, dt := range dtypes {
		for _, n := range []int{0, 1, 1000} {
			each(fmt.Sprintf("%v/n=%d", dt, n), func(name string) {
				a := Buffer(dt, n, func(i int) float64 { return float64(r*8 + i%8) })
				b := Buffer(dt, n, func(i int) float64 { return float64(r*8 + 100 + i%8) })
				ga := Buffer(dt, n, func(int) float64 { return -1 })
				gb := Buffer(dt, n, func(int) float64 { return -1 })
				sa := pg.Send(ctx, a, next, 7)
				sb := pg.Send(ctx, b, next, 8)
				rb := pg.Recv(ctx, gb, prev, 8)
				ra := pg.Recv(ctx, ga, prev, 7)
				for _, w := range []struct {
					what string
					w    distributed.Work
				}{{"send tag 7", sa}, {"send tag 8", sb}, {"recv tag 8", rb}, {"recv tag 7", ra}} {
					check(t, w.what, w.w.Wait())
				}
				expect(t, name+" recv tag 7", ga, func(i int) float64 { return float64(prev*8 + i%8) })
				expect(t, name+" recv tag 8", gb, func(i int) float64 { return float64(prev*8 + 100 + i%8) })
			})
		}
	}
}

// testIssueOrder issues a run of ops without waiting and checks that when
// one is done, every op issued before it is done too.
func testIssueOrder(ctx context.Context, t *testing.T, pg distributed.ProcessGroup, _ Config) {
	r, world := pg.Rank(), pg.Size()
	const ops = 16
	bufs := make([]distributed.Buffer, ops)
	works := make([]distributed.Work, ops)
	for k := range ops {
		bufs[k] = Buffer(distributed.Float32, 100*(k%4)+1, func(i int) float64 { return float64(r + k + i%3) })
		if k%5 == 4 {
			works[k] = pg.Barrier(ctx)
		} else {
			works[k] = pg.AllReduce(ctx, bufs[k], distributed.Sum)
		}
	}
	for k := ops - 1; k >= 0; k -= 3 {
		if !check(t, fmt.Sprintf("op %d", k), works[k].Wait()) {
			continue
		}
		for j := range k {
			select {
			case <-works[j].Done():
			default:
				t.Errorf("op %d is done but op %d, issued before it, is not", k, j)
			}
		}
	}
	for k := range ops {
		if check(t, fmt.Sprintf("op %d", k), works[k].Wait()) && k%5 != 4 {
			expect(t, fmt.Sprintf("op %d", k), bufs[k], func(i int) float64 {
				return float64(world*(k+i%3) + world*(world-1)/2)
			})
		}
	}
}

// testSubgroups forms subgroups with distributed.NewGroup: the even ranks, every
// rank in reverse order, and (for world ≥ 3) two overlapping groups whose
// ops run in between the parent's.
func testSubgroups(ctx context.Context, t *testing.T, pg distributed.ProcessGroup, _ Config) {
	r, world := pg.Rank(), pg.Size()
	var evens, reversed []int
	for i := range world {
		if i%2 == 0 {
			evens = append(evens, i)
		}
		reversed = append(reversed, world-1-i)
	}
	ev, err := distributed.NewGroup(ctx, pg, evens)
	if !check(t, "NewGroup(evens)", err) {
		return
	}
	rev, err := distributed.NewGroup(ctx, pg, reversed)
	if !check(t, "NewGroup(reversed)", err) {
		return
	}
	defer rev.Close()
	if r%2 != 0 {
		if ev != nil {
			t.Errorf("rank %d got a group of the evens %v", r, evens)
		}
	} else if ev == nil {
		t.Errorf("rank %d is even but got no group", r)
	} else {
		defer ev.Close()
		if ev.Rank() != r/2 || ev.Size() != len(evens) {
			t.Errorf("evens: rank %d size %d, want %d %d", ev.Rank(), ev.Size(), r/2, len(evens))
		}
		b := distributed.I64([]int64{int64(r), 1})
		if check(t, "evens allreduce", ev.AllReduce(ctx, b, distributed.Sum).Wait()) {
			want := int64(0)
			for _, e := range evens {
				want += int64(e)
			}
			if b.Int64s()[0] != want || b.Int64s()[1] != int64(len(evens)) {
				t.Errorf("evens allreduce = %v, want [%d %d]", b.Int64s(), want, len(evens))
			}
		}
	}
	if rev.Rank() != world-1-r || rev.Size() != world {
		t.Errorf("reversed: rank %d size %d, want %d %d", rev.Rank(), rev.Size(), world-1-r, world)
	}
	// Broadcast from the reversed group's rank 0, which is world rank world-1;
	// meanwhile an op on the parent.
	b := distributed.I64([]int64{int64(r)})
	w := rev.Broadcast(ctx, b, 0)
	p := distributed.I64([]int64{1})
	pw := pg.AllReduce(ctx, p, distributed.Sum)
	if check(t, "reversed broadcast", w.Wait()) && b.Int64s()[0] != int64(world-1) {
		t.Errorf("reversed broadcast from its rank 0 = %d, want world rank %d", b.Int64s()[0], world-1)
	}
	if check(t, "parent allreduce", pw.Wait()) && p.Int64s()[0] != int64(world) {
		t.Errorf("parent allreduce = %d, want %d", p.Int64s()[0], world)
	}
	if _, err := distributed.NewGroup(ctx, pg, []int{0, 0}); err == nil || !strings.Contains(err.Error(), "twice") {
		t.Errorf("NewGroup([0 0]) = %v, want an error naming the repeated rank", err)
	}
	if _, err := distributed.NewGroup(ctx, pg, []int{world}); err == nil || !strings.Contains(err.Error(), "out of range") {
		t.Errorf("NewGroup([%d]) = %v, want an out-of-range error", world, err)
	}
}

// testErrors makes one invalid call on each of a run of fresh subgroups of
// every rank (an invalid call breaks its group): the call fails on every
// rank with an error naming the op, and later ops fail with ErrAborted.
// Closed groups fail ops with ErrClosed.
func testErrors(ctx context.Context, t *testing.T, pg distributed.ProcessGroup, _ Config) {
	world := pg.Size()
	all := make([]int, world)
	for i := range all {
		all[i] = i
	}
	f := func(n int) distributed.Buffer { return distributed.F32(make([]float32, n)) }
	cases := []struct {
		name, op string
		call     func(g distributed.ProcessGroup) distributed.Work
	}{
		{"allgather-length", "allgather", func(g distributed.ProcessGroup) distributed.Work { return g.AllGather(ctx, f(world*3+1), f(3)) }},
		{"reducescatter-length", "reducescatter", func(g distributed.ProcessGroup) distributed.Work {
			return g.ReduceScatter(ctx, f(2), f(world*2+1), distributed.Sum)
		}},
		{"alltoall-length", "alltoall", func(g distributed.ProcessGroup) distributed.Work { return g.AllToAll(ctx, f(world), f(world+1)) }},
		{"allgather-overlap", "allgather", func(g distributed.ProcessGroup) distributed.Work {
			full := f(world*2 + 1)
			return g.AllGather(ctx, full.Slice(0, world*2), full.Slice(1, 3)) // overlaps, but is no rank's chunk
		}},
		{"dtype-mismatch", "allgather", func(g distributed.ProcessGroup) distributed.Work {
			return g.AllGather(ctx, distributed.F64(make([]float64, world)), f(1))
		}},
		{"broadcast-root", "broadcast", func(g distributed.ProcessGroup) distributed.Work { return g.Broadcast(ctx, f(4), world) }},
		{"reduce-op", "allreduce", func(g distributed.ProcessGroup) distributed.Work {
			return g.AllReduce(ctx, f(4), distributed.ReduceOp(99))
		}},
		{"send-self", "send", func(g distributed.ProcessGroup) distributed.Work { return g.Send(ctx, f(4), g.Rank(), 0) }},
	}
	for _, c := range cases {
		func() {
			g, err := distributed.NewGroup(ctx, pg, all)
			if !check(t, c.name+": NewGroup", err) {
				return
			}
			defer g.Close()
			err = c.call(g).Wait()
			switch {
			case err == nil:
				t.Errorf("%s: invalid %s: no error", c.name, c.op)
			case !strings.Contains(err.Error(), c.op):
				t.Errorf("%s: invalid %s: error %q does not name the op", c.name, c.op, err)
			}
			if err := g.Barrier(ctx).Wait(); !errors.Is(err, distributed.ErrAborted) {
				t.Errorf("%s: barrier after a failed op: %v, want ErrAborted", c.name, err)
			}
		}()
	}
	g, err := distributed.NewGroup(ctx, pg, all)
	if !check(t, "closed: NewGroup", err) {
		return
	}
	check(t, "closed: barrier", g.Barrier(ctx).Wait())
	check(t, "closed: Close", g.Close())
	err = g.AllReduce(ctx, f(1), distributed.Sum).Wait()
	if !errors.Is(err, distributed.ErrClosed) || !errors.Is(err, distributed.ErrAborted) {
		t.Errorf("allreduce on a closed group: %v, want ErrClosed and ErrAborted", err)
	}
	check(t, "closed: second Close", g.Close())
}
