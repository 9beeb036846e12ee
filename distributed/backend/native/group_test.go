package native_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cohortml/cohort/distributed"
	"github.com/cohortml/cohort/distributed/backend/native"
	"github.com/cohortml/cohort/distributed/collective"
	"github.com/cohortml/cohort/distributed/distributedtest"
	"github.com/cohortml/cohort/distributed/grouptest"
	"github.com/cohortml/cohort/distributed/transport/inproc"
)

// Test data: rank r's element i is a small integer in [−2, 2], so sums and
// products over up to 8 ranks are exact in every dtype, and the reference
// needs no tolerance.
func value(r, i int) float64 { return float64((r*7+i*3+r*i)%5 - 2) }

var dtypes = []distributed.DType{distributed.Float32, distributed.Float64, distributed.Int64, distributed.BFloat16, distributed.Float16}
var reduceOps = []distributed.ReduceOp{distributed.Sum, distributed.Avg, distributed.Max, distributed.Min, distributed.Prod}

func dtName(d distributed.DType) string { return d.String() }

func opName(o distributed.ReduceOp) string { return o.String() }

// reduced is the reference reduction of element i over world ranks.
func reduced(dt distributed.DType, op distributed.ReduceOp, world, i int) float64 {
	acc := value(0, i)
	for r := 1; r < world; r++ {
		x := value(r, i)
		switch op {
		case distributed.Sum, distributed.Avg:
			acc += x
		case distributed.Prod:
			acc *= x
		case distributed.Max:
			acc = math.Max(acc, x)
		case distributed.Min:
			acc = math.Min(acc, x)
		}
	}
	if op == distributed.Avg {
		n := float32(world)
		switch dt {
		case distributed.Int64:
			acc = float64(int64(acc) / int64(world))
		case distributed.Float64:
			acc /= float64(world)
		case distributed.Float32:
			acc = float64(float32(acc) / n)
		case distributed.BFloat16:
			acc = float64(collective.BF16ToFloat32(collective.BF16FromFloat32(float32(acc) / n)))
		case distributed.Float16:
			acc = float64(collective.FP16ToFloat32(collective.FP16FromFloat32(float32(acc) / n)))
		}
	}
	return acc
}

// expect compares a buffer with want(i) and reports the first mismatch.
func expect(t *testing.T, what string, b distributed.Buffer, want func(i int) float64) {
	t.Helper()
	for i := range b.Len() {
		if g, w := grouptest.At(b, i), want(i); g != w {
			t.Errorf("%s: element %d = %v, want %v", what, i, g, w)
			return
		}
	}
}

func wait(t *testing.T, what string, w distributed.Work) bool {
	t.Helper()
	if err := w.Wait(); err != nil {
		t.Errorf("%s: %v", what, err)
		return false
	}
	return true
}

// TestCollectivesGrid checks every collective × op × dtype against the
// single-process reference on worlds {1,2,3,4,7,8} × counts {0, 1, world−1,
// 1000}, through the ProcessGroup API (automatic algorithm choice).
func TestCollectivesGrid(t *testing.T) {
	defer distributedtest.CheckLeaks(t)()
	for _, world := range []int{1, 2, 3, 4, 7, 8} {
		t.Run(fmt.Sprintf("world=%d", world), func(t *testing.T) {
			distributedtest.Run(t, world, func(t *testing.T, pg distributed.ProcessGroup) {
				ctx := context.Background()
				r := pg.Rank()
				for _, n := range []int{0, 1, world - 1, 1000} {
					for _, dt := range dtypes {
						name := func(op string) string { return fmt.Sprintf("rank %d %s n=%d %s", r, op, n, dtName(dt)) }
						for _, op := range reduceOps {
							buf := grouptest.Buffer(dt, n, func(i int) float64 { return value(r, i) })
							if wait(t, name("allreduce "+opName(op)), pg.AllReduce(ctx, buf, op)) {
								expect(t, name("allreduce "+opName(op)), buf, func(i int) float64 { return reduced(dt, op, world, i) })
							}
							root := (n + world - 1) % world
							buf = grouptest.Buffer(dt, n, func(i int) float64 { return value(r, i) })
							if wait(t, name("reduce "+opName(op)), pg.Reduce(ctx, buf, root, op)) {
								expect(t, name("reduce "+opName(op)), buf, func(i int) float64 {
									if r == root {
										return reduced(dt, op, world, i)
									}
									return value(r, i)
								})
							}
							out := grouptest.Buffer(dt, n, func(int) float64 { return 99 })
							in := grouptest.Buffer(dt, n*world, func(i int) float64 { return value(r, i) })
							if wait(t, name("reducescatter "+opName(op)), pg.ReduceScatter(ctx, out, in, op)) {
								expect(t, name("reducescatter "+opName(op)), out, func(i int) float64 { return reduced(dt, op, world, r*n+i) })
							}
						}
						root := n % world
						buf := grouptest.Buffer(dt, n, func(i int) float64 { return value(r, i) })
						if wait(t, name("broadcast"), pg.Broadcast(ctx, buf, root)) {
							expect(t, name("broadcast"), buf, func(i int) float64 { return value(root, i) })
						}
						in := grouptest.Buffer(dt, n, func(i int) float64 { return value(r, i) })
						out := grouptest.Buffer(dt, n*world, func(int) float64 { return 99 })
						if wait(t, name("allgather"), pg.AllGather(ctx, out, in)) {
							expect(t, name("allgather"), out, func(i int) float64 { return value(i/n, i%n) })
						}
						in = grouptest.Buffer(dt, n*world, func(i int) float64 { return value(r, i) })
						out = grouptest.Buffer(dt, n*world, func(int) float64 { return 99 })
						if wait(t, name("alltoall"), pg.AllToAll(ctx, out, in)) {
							expect(t, name("alltoall"), out, func(i int) float64 { return value(i/n, r*n+i%n) })
						}
						in = grouptest.Buffer(dt, n, func(i int) float64 { return value(r, i) })
						out = distributed.Buffer{DType: dt}
						if r == root {
							out = grouptest.Buffer(dt, n*world, func(int) float64 { return 99 })
						}
						if wait(t, name("gather"), pg.Gather(ctx, out, in, root)) && r == root {
							expect(t, name("gather"), out, func(i int) float64 { return value(i/n, i%n) })
						}
						in = distributed.Buffer{DType: dt}
						if r == root {
							in = grouptest.Buffer(dt, n*world, func(i int) float64 { return value(r, i) })
						}
						out = grouptest.Buffer(dt, n, func(int) float64 { return 99 })
						if wait(t, name("scatter"), pg.Scatter(ctx, out, in, root)) {
							expect(t, name("scatter"), out, func(i int) float64 { return value(root, r*n+i) })
						}
					}
				}
				wait(t, fmt.Sprintf("rank %d barrier", r), pg.Barrier(ctx))
			})
		})
	}
}

// TestCollectivesLarge: count 2^20+3 (float32, Sum) for the collectives
// whose algorithm changes with size.
func TestCollectivesLarge(t *testing.T) {
	if testing.Short() {
		t.Skip("large counts skipped in -short mode")
	}
	const n = 1<<20 + 3
	for _, world := range []int{2, 3, 8} {
		t.Run(fmt.Sprintf("world=%d", world), func(t *testing.T) {
			distributedtest.Run(t, world, func(t *testing.T, pg distributed.ProcessGroup) {
				ctx := context.Background()
				r := pg.Rank()
				buf := grouptest.Buffer(distributed.Float32, n, func(i int) float64 { return value(r, i) })
				if wait(t, "allreduce", pg.AllReduce(ctx, buf, distributed.Sum)) {
					expect(t, "allreduce", buf, func(i int) float64 { return reduced(distributed.Float32, distributed.Sum, world, i) })
				}
				if world == 8 {
					return
				}
				buf = grouptest.Buffer(distributed.Float32, n, func(i int) float64 { return value(r, i) })
				if wait(t, "broadcast", pg.Broadcast(ctx, buf, 1)) {
					expect(t, "broadcast", buf, func(i int) float64 { return value(1, i) })
				}
				buf = grouptest.Buffer(distributed.Float32, n, func(i int) float64 { return value(r, i) })
				if wait(t, "reduce", pg.Reduce(ctx, buf, 1, distributed.Sum)) && r == 1 {
					expect(t, "reduce", buf, func(i int) float64 { return reduced(distributed.Float32, distributed.Sum, world, i) })
				}
				in := grouptest.Buffer(distributed.Float32, n, func(i int) float64 { return value(r, i) })
				out := grouptest.Buffer(distributed.Float32, n*world, func(int) float64 { return 99 })
				if wait(t, "allgather", pg.AllGather(ctx, out, in)) {
					expect(t, "allgather", out, func(i int) float64 { return value(i/n, i%n) })
				}
				out = grouptest.Buffer(distributed.Float32, n, func(int) float64 { return 99 })
				in = grouptest.Buffer(distributed.Float32, n*world, func(i int) float64 { return value(r, i) })
				if wait(t, "reducescatter", pg.ReduceScatter(ctx, out, in, distributed.Sum)) {
					expect(t, "reducescatter", out, func(i int) float64 { return reduced(distributed.Float32, distributed.Sum, world, r*n+i) })
				}
			})
		})
	}
}

// TestAsyncIssueOrder issues many ops without waiting and checks that each
// completes only after every op issued before it, and that all are right.
func TestAsyncIssueOrder(t *testing.T) {
	defer distributedtest.CheckLeaks(t)()
	distributedtest.Run(t, 3, func(t *testing.T, pg distributed.ProcessGroup) {
		ctx := context.Background()
		const ops = 40
		bufs := make([][]float64, ops)
		works := make([]distributed.Work, ops)
		for k := range ops {
			bufs[k] = []float64{float64(pg.Rank() + k), 1, float64(k)}
			if k%3 == 2 {
				works[k] = pg.Broadcast(ctx, distributed.F64(bufs[k]), k%pg.Size())
			} else {
				works[k] = pg.AllReduce(ctx, distributed.F64(bufs[k]), distributed.Sum)
			}
		}
		for k, w := range works {
			if err := w.Wait(); err != nil {
				t.Fatalf("op %d: %v", k, err)
			}
			for j := range k {
				select {
				case <-works[j].Done():
				default:
					t.Fatalf("op %d done before op %d", k, j)
				}
			}
			want := []float64{float64(3*k + 3), 3, float64(3 * k)}
			if k%3 == 2 {
				want = []float64{float64(k%3 + k), 1, float64(k)}
			}
			if fmt.Sprint(bufs[k]) != fmt.Sprint(want) {
				t.Errorf("op %d: %v, want %v", k, bufs[k], want)
			}
		}
	})
}

func TestSendRecv(t *testing.T) {
	defer distributedtest.CheckLeaks(t)()
	distributedtest.Run(t, 4, func(t *testing.T, pg distributed.ProcessGroup) {
		ctx := context.Background()
		r, n := pg.Rank(), pg.Size()
		right, left := (r+1)%n, (r+n-1)%n
		// A ring exchange on two tags, plus an empty message.
		for round := range 3 {
			out := []int64{int64(r), int64(round)}
			in := make([]int64, 2)
			ws := pg.Send(ctx, distributed.I64(out), right, round%2)
			wr := pg.Recv(ctx, distributed.I64(in), left, round%2)
			if !wait(t, "send", ws) || !wait(t, "recv", wr) {
				return
			}
			if in[0] != int64(left) || in[1] != int64(round) {
				t.Errorf("rank %d round %d: got %v from %d", r, round, in, left)
			}
		}
		if r == 0 {
			wait(t, "empty send", pg.Send(ctx, distributed.F32(nil), 1, 7))
		} else if r == 1 {
			wait(t, "empty recv", pg.Recv(ctx, distributed.F32(nil), 0, 7))
		}
		wait(t, "barrier", pg.Barrier(ctx))
	})
}

func TestSubgroups(t *testing.T) {
	defer distributedtest.CheckLeaks(t)()
	distributedtest.Run(t, 5, func(t *testing.T, pg distributed.ProcessGroup) {
		ctx := context.Background()
		r := pg.Rank()
		evens, err := distributed.NewGroup(ctx, pg, []int{4, 2, 0})
		if err != nil {
			t.Fatalf("rank %d: NewGroup: %v", r, err)
		}
		odds, err := distributed.NewGroup(ctx, pg, []int{1, 3})
		if err != nil {
			t.Fatalf("rank %d: NewGroup: %v", r, err)
		}
		mine := evens
		if r%2 == 1 {
			mine = odds
			if evens != nil {
				t.Errorf("rank %d: got a group it is not in", r)
			}
		} else if odds != nil {
			t.Errorf("rank %d: got a group it is not in", r)
		}
		if mine == nil {
			t.Fatalf("rank %d: no subgroup", r)
		}
		if r%2 == 0 && mine.Rank() != map[int]int{4: 0, 2: 1, 0: 2}[r] {
			t.Errorf("rank %d: subgroup rank %d", r, mine.Rank())
		}
		// Subgroup and world ops in flight together.
		sub := []float64{float64(r)}
		world := []float64{float64(r)}
		ws := mine.AllReduce(ctx, distributed.F64(sub), distributed.Sum)
		ww := pg.AllReduce(ctx, distributed.F64(world), distributed.Sum)
		if wait(t, "subgroup allreduce", ws) {
			want := 6.0
			if r%2 == 1 {
				want = 4
			}
			if sub[0] != want {
				t.Errorf("rank %d: subgroup sum %v, want %v", r, sub[0], want)
			}
		}
		if wait(t, "world allreduce", ww) && world[0] != 10 {
			t.Errorf("rank %d: world sum %v, want 10", r, world[0])
		}
		if _, err := distributed.NewGroup(ctx, pg, []int{0, 0}); err == nil {
			t.Errorf("rank %d: NewGroup with a duplicate rank succeeded", r)
		}
	})
}

// TestDesyncNamesBothRanks: rank 1 broadcasts while the others all-reduce.
// Ranks next to it report a desync naming both ranks and both calls, the
// others learn of it through the abort notice, which carries the same
// text; every rank's error wraps ErrAborted, and so do later ops. Nobody
// hangs.
func TestDesyncNamesBothRanks(t *testing.T) {
	defer distributedtest.CheckLeaks(t)()
	start := time.Now()
	distributedtest.RunWith(t, 4, distributed.GroupOptions{Timeout: time.Minute}, func(t *testing.T, pg distributed.ProcessGroup) {
		ctx := context.Background()
		r := pg.Rank()
		buf := distributed.F32(make([]float32, 16))
		var w distributed.Work
		if r == 1 {
			w = pg.Broadcast(ctx, buf, 0)
		} else {
			w = pg.AllReduce(ctx, buf, distributed.Sum)
		}
		err := w.Wait()
		if err == nil {
			// Only a rank that needs nothing from the odd one out may
			// finish; its next op must fail.
			err = pg.AllReduce(ctx, buf, distributed.Sum).Wait()
		}
		if !errors.Is(err, distributed.ErrAborted) {
			t.Errorf("rank %d: %v, want ErrAborted", r, err)
			return
		}
		msg := err.Error()
		for _, s := range []string{"rank 1", "broadcast(float32×16, root 0)", "allreduce(float32×16, sum)", "seq 1"} {
			if !strings.Contains(msg, s) {
				t.Errorf("rank %d: desync error %q lacks %q", r, msg, s)
			}
		}
		t.Logf("rank %d: %v", r, err)
		if err := pg.Barrier(ctx).Wait(); !errors.Is(err, distributed.ErrAborted) {
			t.Errorf("rank %d: op after abort: %v", r, err)
		}
	})
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("desync took %v to surface", d)
	}
}

// TestPeerDeathMidAllReduce kills one rank while all run all-reduces in a
// loop: every survivor fails within 5 s with an error naming the dead
// rank, directly or through an abort notice.
func TestPeerDeathMidAllReduce(t *testing.T) {
	defer distributedtest.CheckLeaks(t)()
	for _, world := range []int{3, 5} {
		t.Run(fmt.Sprintf("world=%d", world), func(t *testing.T) {
			const victim = 2
			mesh := inproc.NewMesh(world)
			groups := make([]distributed.ProcessGroup, world)
			for r := range world {
				pg, err := native.New(mesh[r], distributed.GroupOptions{Timeout: time.Minute})
				if err != nil {
					t.Fatal(err)
				}
				groups[r] = pg
			}
			errs := make([]error, world)
			failedAt := make([]time.Time, world)
			var killed time.Time
			var wg sync.WaitGroup
			for r, pg := range groups {
				wg.Go(func() {
					buf := distributed.F32(make([]float32, 1<<16))
					for k := 0; ; k++ {
						if r == victim && k == 20 {
							killed = time.Now()
							mesh[victim].Kill()
							return
						}
						if err := pg.AllReduce(context.Background(), buf, distributed.Sum).Wait(); err != nil {
							errs[r], failedAt[r] = err, time.Now()
							return
						}
					}
				})
			}
			wg.Wait()
			for r, err := range errs {
				if r == victim {
					continue
				}
				var oe *distributed.OpError
				if !errors.As(err, &oe) || !errors.Is(err, distributed.ErrAborted) {
					t.Errorf("rank %d: %v, want an *OpError wrapping ErrAborted", r, err)
					continue
				}
				if oe.Peer != victim || !strings.Contains(err.Error(), fmt.Sprintf("peer %d", victim)) {
					t.Errorf("rank %d: error does not name rank %d: %v", r, victim, err)
				}
				if d := failedAt[r].Sub(killed); d > 5*time.Second {
					t.Errorf("rank %d failed %v after the kill", r, d)
				}
				t.Logf("rank %d: %v", r, err)
			}
			for _, pg := range groups {
				pg.Close()
			}
		})
	}
}

// TestTimeoutNamesMissingRank: rank 2 never issues the op; the others fail
// after the group timeout with an error naming it. It runs in a synctest
// bubble: the 30 s timeout passes instantly.
func TestTimeoutNamesMissingRank(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var others sync.WaitGroup
		others.Add(2)
		start := time.Now()
		distributedtest.RunWith(t, 3, distributed.GroupOptions{Timeout: 30 * time.Second}, func(t *testing.T, pg distributed.ProcessGroup) {
			if pg.Rank() == 2 {
				others.Wait() // issue nothing until the others have given up
				err := pg.Barrier(context.Background()).Wait()
				if !errors.Is(err, distributed.ErrAborted) {
					t.Errorf("late rank: %v, want ErrAborted (the others' abort notices)", err)
				}
				return
			}
			defer others.Done()
			err := pg.AllReduce(context.Background(), distributed.F32(make([]float32, 4)), distributed.Sum).Wait()
			var oe *distributed.OpError
			// Its own timeout, or the other's notice of the same, whichever
			// comes first.
			if !errors.As(err, &oe) || !errors.Is(err, distributed.ErrAborted) || !strings.Contains(err.Error(), "deadline exceeded") {
				t.Fatalf("rank %d: %v, want an *OpError wrapping ErrAborted from a timeout", pg.Rank(), err)
			}
			if oe.Peer != 2 || !strings.Contains(err.Error(), "rank 2") {
				t.Errorf("rank %d: error does not name rank 2: %v", pg.Rank(), err)
			}
			if d := time.Since(start); d < 30*time.Second || d > 31*time.Second {
				t.Errorf("rank %d failed after %v, want the 30 s timeout", pg.Rank(), d)
			}
			t.Logf("rank %d: %v", pg.Rank(), err)
		})
	})
}

// TestOpContext: an op's own ctx bounds it too (synctest bubble).
func TestOpContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		done := make(chan struct{})
		distributedtest.Run(t, 2, func(t *testing.T, pg distributed.ProcessGroup) {
			if pg.Rank() == 1 {
				<-done // issues nothing until rank 0 has given up
				return
			}
			defer close(done)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			start := time.Now()
			err := pg.AllReduce(ctx, distributed.F32(make([]float32, 4)), distributed.Sum).Wait()
			if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, distributed.ErrAborted) {
				t.Errorf("got %v, want DeadlineExceeded and ErrAborted", err)
			}
			if d := time.Since(start); d != 5*time.Second {
				t.Errorf("failed after %v, want 5s", d)
			}
		})
	})
}

// TestInvalidArguments: a bad call fails with a message naming the
// problem, and breaks the group so that its peers do not hang.
func TestInvalidArguments(t *testing.T) {
	cases := []struct {
		name string
		call func(pg distributed.ProcessGroup) distributed.Work
		want string
	}{
		{"allgather length", func(pg distributed.ProcessGroup) distributed.Work {
			return pg.AllGather(context.Background(), distributed.F32(make([]float32, 5)), distributed.F32(make([]float32, 2)))
		}, "output has 5 elements, want 4"},
		{"dtype mix", func(pg distributed.ProcessGroup) distributed.Work {
			return pg.AllGather(context.Background(), distributed.F64(make([]float64, 4)), distributed.F32(make([]float32, 2)))
		}, "output is float64 but input is float32"},
		{"root", func(pg distributed.ProcessGroup) distributed.Work {
			return pg.Broadcast(context.Background(), distributed.F32(make([]float32, 2)), 2)
		}, "root 2 out of range"},
		{"reduce op", func(pg distributed.ProcessGroup) distributed.Work {
			return pg.AllReduce(context.Background(), distributed.F32(make([]float32, 2)), distributed.ReduceOp(9))
		}, "unknown reduce op 9"},
		{"send to self", func(pg distributed.ProcessGroup) distributed.Work {
			return pg.Send(context.Background(), distributed.F32(nil), pg.Rank(), 0)
		}, "to itself"},
		{"alltoall split", func(pg distributed.ProcessGroup) distributed.Work {
			return pg.AllToAll(context.Background(), distributed.F32(make([]float32, 3)), distributed.F32(make([]float32, 3)))
		}, "do not split into 2 equal chunks"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			distributedtest.Run(t, 2, func(t *testing.T, pg distributed.ProcessGroup) {
				var err error
				if pg.Rank() == 0 {
					err = tc.call(pg).Wait()
					if err == nil || !strings.Contains(err.Error(), tc.want) {
						t.Errorf("got %v, want an error containing %q", err, tc.want)
					}
				} else {
					err = pg.Barrier(context.Background()).Wait()
				}
				if !errors.Is(err, distributed.ErrAborted) {
					t.Errorf("rank %d: %v, want ErrAborted", pg.Rank(), err)
				}
			})
		})
	}
}

// TestClose: ops pending at Close fail with ErrClosed (and ErrAborted),
// later ops too, Close is idempotent, and the peer waiting in the op that
// was running fails fast.
func TestClose(t *testing.T) {
	defer distributedtest.CheckLeaks(t)()
	mesh := inproc.NewMesh(2)
	pgs := make([]distributed.ProcessGroup, 2)
	for r := range pgs {
		pg, err := native.New(mesh[r], distributed.GroupOptions{Timeout: time.Minute, KeepTransport: r == 1})
		if err != nil {
			t.Fatal(err)
		}
		pgs[r] = pg
	}
	// Rank 0 queues an all-reduce rank 1 never joins, then closes.
	w1 := pgs[0].AllReduce(context.Background(), distributed.F32(make([]float32, 4)), distributed.Sum)
	w2 := pgs[0].Barrier(context.Background())
	peer := pgs[1].Broadcast(context.Background(), distributed.F32(make([]float32, 1)), 1) // a different op: it must not hang either
	if err := pgs[0].Close(); err != nil {
		t.Fatal(err)
	}
	for i, w := range []distributed.Work{w1, w2} {
		if err := w.Wait(); !errors.Is(err, distributed.ErrAborted) {
			t.Errorf("op %d: %v, want ErrAborted", i, err)
		}
	}
	if err := pgs[0].AllReduce(context.Background(), distributed.F32(nil), distributed.Sum).Wait(); !errors.Is(err, distributed.ErrClosed) {
		t.Errorf("op after Close: %v, want ErrClosed", err)
	}
	select {
	case <-peer.Done():
		t.Logf("peer: %v", peer.Wait())
	case <-time.After(5 * time.Second):
		t.Error("peer still waiting 5 s after Close")
	}
	if err := pgs[0].Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	pgs[1].Close()
	mesh[1].Close()
}

// TestInPlaceShards covers the sharded-optimizer pattern: all-gather whose
// input is this rank's chunk of the output, and reduce-scatter whose output
// is this rank's chunk of the input, for small (direct) and large (ring)
// sizes.
func TestInPlaceShards(t *testing.T) {
	for _, world := range []int{1, 2, 3, 4} {
		for _, n := range []int{5, 40000} {
			t.Run(fmt.Sprintf("world=%d/n=%d", world, n), func(t *testing.T) {
				distributedtest.Run(t, world, func(t *testing.T, pg distributed.ProcessGroup) {
					ctx := context.Background()
					r := pg.Rank()
					flat := make([]float32, n*world)
					for i := range flat {
						flat[i] = float32(value(r, i))
					}
					shard := flat[r*n : (r+1)*n]
					if wait(t, "reducescatter", pg.ReduceScatter(ctx, distributed.F32(shard), distributed.F32(flat), distributed.Sum)) {
						expect(t, "reducescatter", distributed.F32(shard), func(i int) float64 { return reduced(distributed.Float32, distributed.Sum, world, r*n+i) })
					}
					for i := range shard {
						shard[i] = float32(r*1000 + i)
					}
					if wait(t, "allgather", pg.AllGather(ctx, distributed.F32(flat), distributed.F32(shard))) {
						expect(t, "allgather", distributed.F32(flat), func(i int) float64 { return float64(i/n*1000 + i%n) })
					}
				})
			})
		}
	}
}

// The native backend's groups, the world's and a mesh's subgroups alike,
// buffer their sends; a ProcessGroup of another kind is not vouched for.
func TestSendsBuffered(t *testing.T) {
	distributedtest.Run(t, 4, func(t *testing.T, pg distributed.ProcessGroup) {
		if !distributed.SendsBuffered(pg) {
			t.Errorf("rank %d: the native world group does not buffer sends", pg.Rank())
		}
		mesh, err := distributed.NewMesh(context.Background(), pg, distributed.MeshDim{Name: "dp", Size: 2}, distributed.MeshDim{Name: "pp", Size: 2})
		if err != nil {
			t.Fatal(err)
		}
		if !distributed.SendsBuffered(mesh.Group("pp")) {
			t.Errorf("rank %d: a mesh subgroup does not buffer sends", pg.Rank())
		}
		if distributed.SendsBuffered(otherGroup{pg}) {
			t.Error("a ProcessGroup of another implementation is taken to buffer sends")
		}
	})
}

// otherGroup is a ProcessGroup that is not the native backend's.
type otherGroup struct{ distributed.ProcessGroup }
