package ddp

import (
	"context"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cohortml/cohort/distributed"
	"github.com/cohortml/cohort/nn"
	"github.com/cohortml/cohort/optim"
)

// guardRun trains newMLP(12, 16, 16, 5) for steps SGD steps on every rank
// of pg with o; after step nudgeAfter (when > 0) the rank nudge adds 1e-3
// to one element of "2.weight". It returns the steps completed and the
// first error.
func guardRun(pg distributed.ProcessGroup, o Options, steps, nudge, nudgeAfter int) (int, error) {
	ctx := context.Background()
	net, m, err := wrapMLP(ctx, pg, o)
	if err != nil {
		return 0, err
	}
	defer m.Close()
	opt, err := optim.NewSGD([]optim.Group{{Params: nn.Parameters(m), LR: 0.05}}, optim.SGDOptions{Momentum: 0.9})
	if err != nil {
		return 0, err
	}
	data := newDataset(1, 400, 5, 12)
	for s := range steps {
		lo := (s*pg.Size() + pg.Rank()) * 4
		if err := data.pass(ctx, m, lo, lo+4); err != nil {
			return s, err
		}
		opt.Step()
		opt.ZeroGrad()
		if s+1 == nudgeAfter && pg.Rank() == nudge {
			net.params[2].Param.Value.Data()[3] += 1e-3
		}
	}
	return steps, nil
}

// TestVerifyEvery plants a divergence (one rank's parameter nudged after
// a step) and checks that the guard stops every rank at the next check,
// naming the rank and the parameter; without the guard the same run
// finishes with diverged replicas, and a healthy run checked every step
// passes.
func TestVerifyEvery(t *testing.T) {
	const steps = 12
	for _, world := range []int{2, 3, 4} {
		for _, tc := range []struct {
			name                     string
			every, nudge, nudgeAfter int
			wantStopAt               int // steps completed when the guard fires; 0: never fires
		}{
			{"healthy/every=1", 1, -1, 0, 0},
			{"nudged-last-rank/every=4", 4, world - 1, 5, 8}, // checks after steps 4 (equal) and 8 (diverged)
			{"nudged-rank-1/every=3", 3, 1, 3, 3},            // nudged right before the check after step 3
			{"nudged-rank-1/off", 0, 1, 3, 0},
		} {
			t.Run(fmt.Sprintf("world=%d/%s", world, tc.name), func(t *testing.T) {
				done := make([]int, world)
				errs := runDist(t, world, func(pg distributed.ProcessGroup) error {
					n, err := guardRun(pg, Options{VerifyEvery: tc.every}, steps, tc.nudge, tc.nudgeAfter)
					done[pg.Rank()] = n
					return err
				})
				for r, err := range errs {
					if tc.wantStopAt == 0 {
						if err != nil {
							t.Fatalf("rank %d: %v", r, err)
						}
						continue
					}
					want := fmt.Sprintf("rank %d (first differing parameter %q)", tc.nudge, "2.weight")
					if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), fmt.Sprintf("after step %d", tc.wantStopAt)) {
						t.Fatalf("rank %d: err = %v, want one naming %s after step %d", r, err, want, tc.wantStopAt)
					}
					if done[r] != tc.wantStopAt {
						t.Fatalf("rank %d stopped after %d steps, want %d", r, done[r], tc.wantStopAt)
					}
				}
			})
		}
	}
	t.Run("negative", func(t *testing.T) {
		errs := runDist(t, 1, func(pg distributed.ProcessGroup) error {
			_, err := Wrap(context.Background(), newMLP(1, 3, 2), pg, Options{VerifyEvery: -1})
			return err
		})
		if errs[0] == nil || !strings.Contains(errs[0].Error(), "VerifyEvery -1") {
			t.Fatalf("Wrap with VerifyEvery -1: %v", errs[0])
		}
	})
}

// spanEvent is one call of Options.Span or of the closer it returned.
type spanEvent struct {
	open        bool
	track, name string
	at          time.Time
}

// spanLog records a rank's spans.
type spanLog struct {
	mu     sync.Mutex
	events []spanEvent
}

func (l *spanLog) span(track, name string) func() {
	l.add(spanEvent{true, track, name, time.Now()})
	return func() { l.add(spanEvent{false, track, name, time.Now()}) }
}

func (l *spanLog) add(e spanEvent) {
	l.mu.Lock()
	l.events = append(l.events, e)
	l.mu.Unlock()
}

// TestSpans checks Options.Span: every step opens and closes one span per
// bucket on "comm" and one "wait for gradients" span on "compute"; every
// span closes after it opened and before the step ends; and the first
// bucket's all-reduce is launched while autograd is still computing (before
// the wait), i.e. communication overlaps backward.
func TestSpans(t *testing.T) {
	const steps = 3
	for _, world := range []int{1, 2, 3} {
		for _, hook := range []struct {
			name string
			o    func() Options
		}{
			{"allreduce", func() Options { return smallBuckets }},
			{"fp16", func() Options { o := smallBuckets; o.Hook = NewFP16Hook(); return o }},
		} {
			t.Run(fmt.Sprintf("world=%d/%s", world, hook.name), func(t *testing.T) {
				logs := make([]*spanLog, world)
				buckets := make([]int, world)
				errs := runDist(t, world, func(pg distributed.ProcessGroup) error {
					ctx := context.Background()
					l := &spanLog{}
					logs[pg.Rank()] = l
					o := hook.o()
					o.Span = l.span
					m, err := Wrap(ctx, newMLP(1, 12, 16, 16, 5), pg, o)
					if err != nil {
						return err
					}
					defer m.Close()
					data := newDataset(1, 100, 5, 12)
					for s := range steps {
						x, y := data.batch(s*2, s*2+2)
						out, err := m.Forward(ctx, x)
						if err != nil {
							return err
						}
						l.add(spanEvent{true, "test", "backward", time.Now()})
						if err := m.Backward(ctx, loss(out, y)); err != nil {
							return err
						}
						l.add(spanEvent{false, "test", "backward", time.Now()})
					}
					buckets[pg.Rank()] = len(m.Plan().Buckets)
					return nil
				})
				for r, err := range errs {
					if err != nil {
						t.Fatalf("rank %d: %v", r, err)
					}
				}
				for r, l := range logs {
					checkSpans(t, r, l.events, steps, buckets[r])
				}
			})
		}
	}
}

func checkSpans(t *testing.T, rank int, events []spanEvent, steps, buckets int) {
	t.Helper()
	step := -1
	var stepEvents [][]spanEvent
	for _, e := range events {
		if e.track == "test" {
			if e.open {
				step++
				stepEvents = append(stepEvents, nil)
			}
			continue
		}
		if step < 0 {
			t.Fatalf("rank %d: span event %+v outside a step", rank, e)
		}
		stepEvents[step] = append(stepEvents[step], e)
	}
	if len(stepEvents) != steps {
		t.Fatalf("rank %d: %d steps seen, want %d", rank, len(stepEvents), steps)
	}
	for s, evs := range stepEvents {
		opened := map[string]time.Time{}
		closed := map[string]bool{}
		for _, e := range evs {
			key := e.track + "/" + e.name
			if e.open {
				if _, dup := opened[key]; dup {
					t.Fatalf("rank %d step %d: %s opened twice", rank, s, key)
				}
				opened[key] = e.at
				continue
			}
			at, ok := opened[key]
			if !ok || closed[key] || e.at.Before(at) {
				t.Fatalf("rank %d step %d: %s closed without being open, twice, or before it opened", rank, s, key)
			}
			closed[key] = true
		}
		// The buckets are rebuilt after the first step: count this step's.
		n := 0
		for n < len(evs) && opened[fmt.Sprintf("comm/all_reduce bucket %d", n)] != (time.Time{}) {
			n++
		}
		if n < 2 || s == steps-1 && n != buckets {
			t.Fatalf("rank %d step %d: spans of %d buckets (the plan has %d at the end)", rank, s, n, buckets)
		}
		want := map[string]bool{"compute/wait for gradients": true}
		for k := range n {
			want[fmt.Sprintf("comm/all_reduce bucket %d", k)] = true
		}
		for key := range want {
			if !closed[key] {
				t.Fatalf("rank %d step %d: no closed span %s (events %+v)", rank, s, key, evs)
			}
		}
		if len(opened) != len(want) {
			t.Fatalf("rank %d step %d: spans %v, want %v", rank, s, opened, want)
		}
		if b0, wait := opened["comm/all_reduce bucket 0"], opened["compute/wait for gradients"]; !b0.Before(wait) {
			t.Fatalf("rank %d step %d: bucket 0 launched at %v, not before autograd returned (%v): no overlap", rank, s, b0, wait)
		}
	}
}

// TestBusyTime checks the union of bucket intervals and its part before
// the end of backward.
func TestBusyTime(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	iv := func(a, b int) interval { return interval{at(a), at(b)} }
	for _, tc := range []struct {
		name         string
		ivs          []interval
		cut          int
		busy, before int // ms
	}{
		{"none", nil, 5, 0, 0},
		{"one inside backward", []interval{iv(1, 3)}, 5, 2, 2},
		{"one across the cut", []interval{iv(1, 8)}, 5, 7, 4},
		{"one after the cut", []interval{iv(6, 8)}, 5, 2, 0},
		{"gap not counted", []interval{iv(0, 2), iv(5, 7)}, 10, 4, 4},
		{"overlap counted once", []interval{iv(0, 4), iv(2, 6)}, 10, 6, 6},
		{"nested", []interval{iv(0, 10), iv(2, 3), iv(4, 5)}, 6, 10, 6},
		{"later finishes first", []interval{iv(0, 9), iv(1, 2), iv(9, 12)}, 4, 12, 4},
		{"gap across the cut", []interval{iv(0, 2), iv(3, 5), iv(7, 9)}, 4, 6, 3},
		{"touching", []interval{iv(0, 2), iv(2, 4)}, 4, 4, 4},
		{"unfinished stamp", []interval{{at(3), time.Time{}}}, 4, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			busy, before := busyTime(tc.ivs, at(tc.cut))
			if busy != time.Duration(tc.busy)*time.Millisecond || before != time.Duration(tc.before)*time.Millisecond {
				t.Fatalf("busyTime = %v, %v; want %dms, %dms", busy, before, tc.busy, tc.before)
			}
		})
	}
}

// TestHashFloats checks that the replica hash sees every element: flipping
// any one bit of any element, at every length around the 8-element
// stride, changes it.
func TestHashFloats(t *testing.T) {
	for n := range 20 {
		t.Run(fmt.Sprintf("n=%d", n), func(t *testing.T) {
			s := make([]float32, n)
			for i := range s {
				s[i] = float32(i) * 0.37
			}
			base := hashFloats(s)
			if n > 0 && hashFloats(s[:n-1]) == base {
				t.Fatalf("dropping the last element leaves the hash unchanged")
			}
			for i := range s {
				for _, bit := range []uint32{0, 13, 31} {
					c := append([]float32(nil), s...)
					c[i] = math.Float32frombits(math.Float32bits(c[i]) ^ 1<<bit)
					if hashFloats(c) == base {
						t.Fatalf("flipping bit %d of element %d leaves the hash unchanged", bit, i)
					}
				}
			}
		})
	}
}

func BenchmarkHashFloats(b *testing.B) {
	s := make([]float32, 1<<20)
	b.SetBytes(4 << 20)
	for b.Loop() {
		hashFloats(s)
	}
}
