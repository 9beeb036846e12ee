package gemm

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestPoolRunsEveryPartOnce(t *testing.T) {
	for _, tc := range []struct{ helpers, parts int }{
		{0, 1}, {0, 3}, {1, 2}, {1, 5}, {3, 4}, {3, 2}, {7, 7},
	} {
		t.Run(fmt.Sprintf("helpers=%d/parts=%d", tc.helpers, tc.parts), func(t *testing.T) {
			var pl pool
			for call := 0; call < 50; call++ {
				runs := make([]atomic.Int32, tc.parts)
				pl.parallel(tc.helpers, tc.parts, func(p int) { runs[p].Add(1) })
				for p := range runs {
					if n := runs[p].Load(); n != 1 {
						t.Fatalf("call %d: part %d ran %d times, want 1", call, p, n)
					}
				}
			}
		})
	}
}

// TestPoolHelpersShareWork checks that a helper, once running, takes
// parts: with parts that wait for each other, the call can only finish
// when two goroutines run them at once.
func TestPoolHelpersShareWork(t *testing.T) {
	var pl pool
	var wg sync.WaitGroup
	wg.Add(2)
	done := make(chan struct{})
	go func() {
		pl.parallel(1, 2, func(int) {
			wg.Done()
			wg.Wait()
		})
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("two parts waiting for each other never ran at the same time")
	}
}

func TestPoolPanic(t *testing.T) {
	var pl pool
	for _, bad := range []int{0, 1, 3} {
		t.Run(fmt.Sprintf("part=%d", bad), func(t *testing.T) {
			var ran atomic.Int32
			defer func() {
				r := recover()
				msg, _ := r.(string)
				if !strings.HasPrefix(msg, "gemm: worker: ") || !strings.Contains(msg, "boom") {
					t.Errorf("recovered %v, want a gemm: worker: panic naming the cause", r)
				}
				if n := ran.Load(); n != 4 {
					t.Errorf("%d parts finished before the panic was raised, want all 4", n)
				}
			}()
			pl.parallel(1, 4, func(p int) {
				defer ran.Add(1)
				if p == bad {
					panic("boom")
				}
			})
		})
	}
	// The pool still works after a panic.
	var n atomic.Int32
	pl.parallel(1, 3, func(int) { n.Add(1) })
	if n.Load() != 3 {
		t.Errorf("after a panic, %d of 3 parts ran", n.Load())
	}
}

// TestPoolHelpersExit checks that helpers do not outlive a quiet spell.
func TestPoolHelpersExit(t *testing.T) {
	time.Sleep(20 * time.Millisecond) // let helpers of earlier tests exit
	before := runtime.NumGoroutine()
	g := MustNew(t, Options{BLAS: BLASGo, Kernel: KernelGo, Threads: 3})
	a, b, c := make([]float32, 200*200), make([]float32, 200*200), make([]float32, 200*200)
	for range 20 {
		g.Sgemm(false, false, 200, 200, 200, 1, a, 200, b, 200, 0, c, 200)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		g.pool.mu.Lock()
		idle := len(g.pool.idle)
		g.pool.mu.Unlock()
		n := runtime.NumGoroutine()
		if idle == 0 && n <= before {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("5 s after the last call: %d helpers listed idle, %d goroutines (%d before)", idle, n, before)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestConcurrentCallers runs parallel products from several goroutines on
// one Impl at once, each on its own C, and checks every result.
func TestConcurrentCallers(t *testing.T) {
	for _, kern := range Kernels() {
		t.Run("kernel="+kern, func(t *testing.T) {
			g := MustNew(t, Options{BLAS: BLASGo, Kernel: kern, Threads: 2})
			g.coldMin = 0
			const m, n, k = 150, 160, 100 // over minFlopsPerThread: split in two
			rng := rand.New(rand.NewPCG(7, 8))
			a, b := make([]float32, m*k), make([]float32, k*n)
			for i := range a {
				a[i] = float32(rng.IntN(7) - 3)
			}
			for i := range b {
				b[i] = float32(rng.IntN(7) - 3)
			}
			want := make([]float32, m*n)
			Naive(false, false, m, n, k, 1, a, k, b, n, 0, want, n)
			var wg sync.WaitGroup
			errs := make(chan string, 4)
			for w := range 4 {
				wg.Go(func() {
					c := make([]float32, m*n)
					for it := range 30 {
						g.Sgemm(false, false, m, n, k, 1, a, k, b, n, 0, c, n)
						for i := range c {
							if c[i] != want[i] { // small integers: exact
								errs <- fmt.Sprintf("caller %d call %d: C[%d] = %v, want %v", w, it, i, c[i], want[i])
								return
							}
						}
					}
				})
			}
			wg.Wait()
			close(errs)
			for e := range errs {
				t.Error(e)
			}
		})
	}
}
