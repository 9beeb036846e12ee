package storetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cohortml/cohort/distributed/store"
)

// Opener returns a handle on one store. Every call returns a handle on
// the same underlying store: a new client for networked stores, possibly
// the store itself for in-process ones. Handles are closed by the suite
// only in the Close tests; the Factory's t.Cleanup must release the rest.
type Opener func(t *testing.T) store.Store

// Factory creates a fresh, empty store for one subtest and returns its
// Opener. It registers cleanup with t.Cleanup.
type Factory func(t *testing.T) Opener

// InProcess returns the Factory of an in-process store: every Opener of
// a subtest returns the one store newStore made for it, closed when the
// subtest ends.
func InProcess(newStore func() store.Store) Factory {
	return func(t *testing.T) Opener {
		s := newStore()
		t.Cleanup(func() { s.Close() })
		return func(*testing.T) store.Store { return s }
	}
}

// Timeouts used by the suite. A blocked call is given short to prove it is
// still blocked; a call expected to finish is given long.
const (
	short = 50 * time.Millisecond
	long  = 10 * time.Second
)

// Run runs the whole suite, one named subtest per property.
func Run(t *testing.T, newStore Factory) {
	tests := []struct {
		name string
		fn   func(t *testing.T, open Opener)
	}{
		{"SetGet", testSetGet},
		{"Overwrite", testOverwrite},
		{"ValuesAreCopies", testValuesAreCopies},
		{"GetBlocksUntilSet", testGetBlocksUntilSet},
		{"GetContextEnds", testGetContextEnds},
		{"ManyWaitersOneSet", testManyWaitersOneSet},
		{"WaitManyKeys", testWaitManyKeys},
		{"WaitNamesMissingKeys", testWaitNamesMissingKeys},
		{"WaitNoKeys", testWaitNoKeys},
		{"Add", testAdd},
		{"AddNotInteger", testAddNotInteger},
		{"AddConcurrent", testAddConcurrent},
		{"CompareAndSwap", testCompareAndSwap},
		{"CompareAndSwapConcurrent", testCompareAndSwapConcurrent},
		{"Delete", testDelete},
		{"DeleteThenSetWakesWaiter", testDeleteThenSetWakesWaiter},
		{"SharedHandleConcurrent", testSharedHandleConcurrent},
		{"CancelOneOfMany", testCancelOneOfMany},
		{"CloseUnblocks", testCloseUnblocks},
		{"CallsAfterClose", testCallsAfterClose},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.fn(t, newStore(t))
		})
	}
}

func ctxLong(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), long)
	t.Cleanup(cancel)
	return ctx
}

// result is what a call run in the background returned.
type result struct {
	value []byte
	err   error
}

// goGet runs s.Get in a goroutine owned by the test: the test waits for it
// before finishing.
func goGet(t *testing.T, ctx context.Context, s store.Store, key string) <-chan result {
	return background(t, func() result {
		v, err := s.Get(ctx, key)
		return result{v, err}
	})
}

// goWait runs s.Wait as goGet runs s.Get.
func goWait(t *testing.T, ctx context.Context, s store.Store, keys ...string) <-chan error {
	return background(t, func() error { return s.Wait(ctx, keys...) })
}

// background runs call in a goroutine the test waits for before
// finishing, and returns a channel that receives what it returned.
func background[T any](t *testing.T, call func() T) <-chan T {
	ch := make(chan T, 1)
	var wg sync.WaitGroup
	wg.Go(func() { ch <- call() })
	t.Cleanup(wg.Wait)
	return ch
}

// recvResult returns what a background call (a what) returned, and fails
// t if that takes longer than the long timeout.
func recvResult[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(long):
		t.Fatalf("%s did not return within %v", what, long)
		var zero T
		return zero
	}
}

// notYet fails t with what msg makes of it if the background call ch
// stands for returns within the short timeout.
func notYet[T any](t *testing.T, ch <-chan T, msg func(T) string) {
	t.Helper()
	select {
	case v := <-ch:
		t.Fatal(msg(v))
	case <-time.After(short):
	}
}

// assertBlocked checks that a Get with a short deadline times out, i.e.
// key is absent and Get blocks rather than returning early.
func assertBlocked(t *testing.T, s store.Store, key string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), short)
	defer cancel()
	v, err := s.Get(ctx, key)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Get(%q) on an absent key = %q, %v; want an error wrapping context.DeadlineExceeded", key, v, err)
	}
}

func mustSet(t *testing.T, s store.Store, key string, value []byte) {
	t.Helper()
	if err := s.Set(ctxLong(t), key, value); err != nil {
		t.Fatalf("Set(%q): %v", key, err)
	}
}

func mustGet(t *testing.T, s store.Store, key string) []byte {
	t.Helper()
	v, err := s.Get(ctxLong(t), key)
	if err != nil {
		t.Fatalf("Get(%q): %v", key, err)
	}
	return v
}

func testSetGet(t *testing.T, open Opener) {
	big := make([]byte, 1<<20)
	for i := range big {
		big[i] = byte(i * 7)
	}
	tests := []struct {
		name  string
		key   string
		value []byte
	}{
		{"text", "addr/rank0", []byte("10.0.0.1:4242")},
		{"empty", "empty", []byte{}},
		{"nil-stored-as-empty", "nil", nil},
		{"binary", "bin", []byte{0, 1, 0, 255, '\n', 0}},
		{"unicode-key", "ключ/🔑", []byte("v")},
		{"1MiB", "big", big},
	}
	writer, reader := open(t), open(t)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			mustSet(t, writer, tc.key, tc.value)
			got := mustGet(t, reader, tc.key)
			if got == nil {
				t.Fatalf("Get(%q) = nil; a present key must return a non-nil slice", tc.key)
			}
			if !bytes.Equal(got, tc.value) {
				t.Fatalf("Get(%q) = %d bytes %.32q; want %d bytes %.32q", tc.key, len(got), got, len(tc.value), tc.value)
			}
		})
	}
}

func testOverwrite(t *testing.T, open Opener) {
	s := open(t)
	mustSet(t, s, "k", []byte("first"))
	mustSet(t, s, "k", []byte("second, longer"))
	mustSet(t, s, "k", []byte("3"))
	if got := mustGet(t, open(t), "k"); string(got) != "3" {
		t.Fatalf("after three Sets Get = %q; want %q", got, "3")
	}
}

func testValuesAreCopies(t *testing.T, open Opener) {
	s := open(t)
	v := []byte("original")
	mustSet(t, s, "k", v)
	copy(v, "CHANGED!")
	got := mustGet(t, s, "k")
	if string(got) != "original" {
		t.Fatalf("Get after mutating the Set slice = %q; the store must keep its own copy", got)
	}
	copy(got, "CHANGED!")
	if again := mustGet(t, s, "k"); string(again) != "original" {
		t.Fatalf("Get after mutating a returned slice = %q; Get must return a copy", again)
	}
}

func testGetBlocksUntilSet(t *testing.T, open Opener) {
	reader, writer := open(t), open(t)
	assertBlocked(t, reader, "late")
	ch := goGet(t, ctxLong(t), reader, "late")
	notYet(t, ch, func(r result) string {
		return fmt.Sprintf("Get returned %q, %v before the key was set", r.value, r.err)
	})
	mustSet(t, writer, "late", []byte("here"))
	r := recvResult(t, ch, "Get blocked on a key that was then set")
	if r.err != nil || string(r.value) != "here" {
		t.Fatalf("blocked Get = %q, %v; want %q, nil", r.value, r.err, "here")
	}
}

func testGetContextEnds(t *testing.T, open Opener) {
	tests := []struct {
		name string
		ctx  func() (context.Context, context.CancelFunc)
		want error
	}{
		{"deadline", func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), short)
		}, context.DeadlineExceeded},
		{"cancel", func() (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithCancel(context.Background())
			time.AfterFunc(short, cancel)
			return ctx, cancel
		}, context.Canceled},
		{"already-done", func() (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			return ctx, cancel
		}, context.Canceled},
	}
	s := open(t)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := tc.ctx()
			defer cancel()
			key := "never/" + tc.name
			start := time.Now()
			v, err := s.Get(ctx, key)
			if !errors.Is(err, tc.want) {
				t.Fatalf("Get = %q, %v; want an error wrapping %v", v, err, tc.want)
			}
			if !strings.Contains(err.Error(), key) {
				t.Errorf("error %q does not name the key %q", err, key)
			}
			if d := time.Since(start); d > long/2 {
				t.Errorf("Get took %v to notice its context ended", d)
			}
		})
	}
	// The store still works after abandoned calls.
	mustSet(t, s, "after", []byte("ok"))
	if got := mustGet(t, s, "after"); string(got) != "ok" {
		t.Fatalf("Get after cancelled calls = %q; want %q", got, "ok")
	}
}

func testManyWaitersOneSet(t *testing.T, open Opener) {
	const handles, perHandle = 4, 25
	ctx := ctxLong(t)
	var chans []<-chan result
	for range handles {
		s := open(t)
		for range perHandle {
			chans = append(chans, goGet(t, ctx, s, "go"))
		}
	}
	mustSet(t, open(t), "go", []byte("now"))
	for i, ch := range chans {
		r := recvResult(t, ch, fmt.Sprintf("waiter %d", i))
		if r.err != nil || string(r.value) != "now" {
			t.Fatalf("waiter %d: Get = %q, %v; want %q, nil", i, r.value, r.err, "now")
		}
	}
}

func testWaitManyKeys(t *testing.T, open Opener) {
	const n = 50
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("rank/%d/addr", i)
	}
	waiter, writer := open(t), open(t)
	ch := goWait(t, ctxLong(t), waiter, keys...)
	// Set all but one, in reverse order; the waiter must still be blocked.
	for i := n - 1; i >= 1; i-- {
		mustSet(t, writer, keys[i], []byte(strconv.Itoa(i)))
	}
	notYet(t, ch, func(err error) string { return fmt.Sprintf("Wait returned %v with key %q still missing", err, keys[0]) })
	mustSet(t, writer, keys[0], []byte("0"))
	if err := recvResult(t, ch, "Wait on 50 keys, all set"); err != nil {
		t.Fatalf("Wait = %v; want nil", err)
	}
	// Every key set: returns at once.
	if err := waiter.Wait(ctxLong(t), keys...); err != nil {
		t.Fatalf("Wait on keys already set = %v", err)
	}
}

func testWaitNamesMissingKeys(t *testing.T, open Opener) {
	s := open(t)
	mustSet(t, s, "present", []byte("x"))
	ctx, cancel := context.WithTimeout(context.Background(), short)
	defer cancel()
	err := s.Wait(ctx, "present", "missing-a", "missing-b")
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait = %v; want an error wrapping context.DeadlineExceeded", err)
	}
	for _, k := range []string{"missing-a", "missing-b"} {
		if !strings.Contains(err.Error(), k) {
			t.Errorf("error %q does not name missing key %q", err, k)
		}
	}
	if strings.Contains(err.Error(), `"present"`) {
		t.Errorf("error %q names key %q, which is set", err, "present")
	}
}

func testWaitNoKeys(t *testing.T, open Opener) {
	if err := open(t).Wait(ctxLong(t)); err != nil {
		t.Fatalf("Wait() with no keys = %v; want nil", err)
	}
}

func testAdd(t *testing.T, open Opener) {
	s := open(t)
	ctx := ctxLong(t)
	steps := []struct {
		delta, want int64
	}{{5, 5}, {-7, -2}, {0, -2}, {1 << 40, 1<<40 - 2}}
	for _, st := range steps {
		got, err := s.Add(ctx, "counter", st.delta)
		if err != nil || got != st.want {
			t.Fatalf("Add(%d) = %d, %v; want %d, nil", st.delta, got, err, st.want)
		}
	}
	if v := mustGet(t, s, "counter"); string(v) != strconv.FormatInt(1<<40-2, 10) {
		t.Fatalf("Get of a counter = %q; want its decimal value %d", v, int64(1<<40-2))
	}
	// A counter can be seeded with Set.
	mustSet(t, s, "seeded", []byte("41"))
	if got, err := s.Add(ctx, "seeded", 1); err != nil || got != 42 {
		t.Fatalf("Add on a Set %q = %d, %v; want 42, nil", "41", got, err)
	}
}

func testAddNotInteger(t *testing.T, open Opener) {
	s := open(t)
	mustSet(t, s, "word", []byte("abc"))
	if got, err := s.Add(ctxLong(t), "word", 1); err == nil {
		t.Fatalf("Add on %q = %d, nil; want an error", "abc", got)
	} else if !strings.Contains(err.Error(), "word") {
		t.Errorf("error %q does not name the key", err)
	}
	if v := mustGet(t, s, "word"); string(v) != "abc" {
		t.Fatalf("a failed Add changed the value to %q", v)
	}
}

func testAddConcurrent(t *testing.T, open Opener) {
	const handles, goroutines, adds = 4, 4, 50
	total := handles * goroutines * adds
	seen := make([]int, total+1)
	var mu sync.Mutex
	var wg sync.WaitGroup
	errs := make(chan error, handles*goroutines)
	ctx := ctxLong(t)
	for range handles {
		s := open(t)
		for range goroutines {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range adds {
					n, err := s.Add(ctx, "hits", 1)
					if err != nil {
						errs <- err
						return
					}
					mu.Lock()
					if n >= 1 && n <= int64(total) {
						seen[n]++
					}
					mu.Unlock()
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("concurrent Add: %v", err)
	}
	for n := 1; n <= total; n++ {
		if seen[n] != 1 {
			t.Fatalf("Add returned %d %d times; every value 1..%d must be returned exactly once", n, seen[n], total)
		}
	}
	if v := mustGet(t, open(t), "hits"); string(v) != strconv.Itoa(total) {
		t.Fatalf("final counter = %q; want %d", v, total)
	}
}

func testCompareAndSwap(t *testing.T, open Opener) {
	type step struct {
		expected, desired []byte
		want              []byte // value returned; nil means absent
	}
	tests := []struct {
		name  string
		setup []byte // nil: key absent
		steps []step
		final []byte // nil: key must be absent afterwards
	}{
		{"absent/nil-expected-sets", nil, []step{{nil, []byte("v1"), []byte("v1")}}, []byte("v1")},
		{"absent/expected-value-fails", nil, []step{{[]byte("x"), []byte("v1"), nil}}, nil},
		{"absent/empty-expected-fails", nil, []step{{[]byte{}, []byte("v1"), nil}}, nil},
		{"present/equal-swaps", []byte("a"), []step{{[]byte("a"), []byte("b"), []byte("b")}}, []byte("b")},
		{"present/mismatch-keeps", []byte("a"), []step{{[]byte("z"), []byte("b"), []byte("a")}}, []byte("a")},
		{"present/nil-expected-keeps", []byte("a"), []step{{nil, []byte("b"), []byte("a")}}, []byte("a")},
		{"present-empty/empty-expected-swaps", []byte{}, []step{{[]byte{}, []byte("b"), []byte("b")}}, []byte("b")},
		{"chain", nil, []step{
			{nil, []byte("1"), []byte("1")},
			{nil, []byte("2"), []byte("1")},
			{[]byte("1"), []byte("2"), []byte("2")},
			{[]byte("1"), []byte("3"), []byte("2")},
			{[]byte("2"), []byte{}, []byte{}},
		}, []byte{}},
	}
	s := open(t)
	ctx := ctxLong(t)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			key := "cas/" + tc.name
			if tc.setup != nil {
				mustSet(t, s, key, tc.setup)
			}
			for i, st := range tc.steps {
				got, err := s.CompareAndSwap(ctx, key, st.expected, st.desired)
				if err != nil {
					t.Fatalf("step %d: CompareAndSwap: %v", i, err)
				}
				if (got == nil) != (st.want == nil) || !bytes.Equal(got, st.want) {
					t.Fatalf("step %d: CompareAndSwap(expected %s, desired %q) = %s; want %s",
						i, show(st.expected), st.desired, show(got), show(st.want))
				}
			}
			if tc.final == nil {
				assertBlocked(t, s, key)
				return
			}
			if got := mustGet(t, s, key); !bytes.Equal(got, tc.final) {
				t.Fatalf("final value %q; want %q", got, tc.final)
			}
		})
	}
}

func show(b []byte) string {
	if b == nil {
		return "<absent>"
	}
	return strconv.Quote(string(b))
}

func testCompareAndSwapConcurrent(t *testing.T, open Opener) {
	// Each value is "count/worker/attempt", unique per write, so a
	// CompareAndSwap that returns exactly our desired value succeeded.
	const workers, incs = 8, 25
	mustSet(t, open(t), "cas-counter", []byte("0/-/-"))
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	wins := make([]int, workers)
	ctx := ctxLong(t)
	for w := range workers {
		s := open(t)
		wg.Add(1)
		go func() {
			defer wg.Done()
			cur, err := s.Get(ctx, "cas-counter")
			if err != nil {
				errs <- fmt.Errorf("worker %d: %w", w, err)
				return
			}
			for attempt := 0; attempt < 100000; attempt++ {
				n, err := strconv.Atoi(string(cur[:bytes.IndexByte(cur, '/')]))
				if err != nil {
					errs <- fmt.Errorf("worker %d: counter holds %q", w, cur)
					return
				}
				if n >= workers*incs {
					return
				}
				next := []byte(fmt.Sprintf("%d/%d/%d", n+1, w, attempt))
				got, err := s.CompareAndSwap(ctx, "cas-counter", cur, next)
				if err != nil {
					errs <- fmt.Errorf("worker %d: %w", w, err)
					return
				}
				if bytes.Equal(got, next) {
					wins[w]++
				}
				cur = got
			}
			errs <- fmt.Errorf("worker %d: no progress after 100000 attempts", w)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	total := 0
	for _, n := range wins {
		total += n
	}
	if total != workers*incs {
		t.Fatalf("%d CompareAndSwap calls reported success; the counter went from 0 to %d (two swaps from the same value?)", total, workers*incs)
	}
	v := mustGet(t, open(t), "cas-counter")
	if want := strconv.Itoa(workers * incs); !strings.HasPrefix(string(v), want+"/") {
		t.Fatalf("counter after concurrent CAS increments = %q; want count %s", v, want)
	}
}

func testDelete(t *testing.T, open Opener) {
	s := open(t)
	ctx := ctxLong(t)
	mustSet(t, s, "k", []byte("v"))
	if ok, err := s.Delete(ctx, "k"); err != nil || !ok {
		t.Fatalf("Delete of a present key = %v, %v; want true, nil", ok, err)
	}
	if ok, err := s.Delete(ctx, "k"); err != nil || ok {
		t.Fatalf("second Delete = %v, %v; want false, nil", ok, err)
	}
	if ok, err := s.Delete(ctx, "never-set"); err != nil || ok {
		t.Fatalf("Delete of a key never set = %v, %v; want false, nil", ok, err)
	}
	assertBlocked(t, open(t), "k")
	if got, err := s.CompareAndSwap(ctx, "k", []byte("v"), []byte("w")); err != nil || got != nil {
		t.Fatalf("CompareAndSwap on a deleted key = %s, %v; want <absent>, nil", show(got), err)
	}
	mustSet(t, s, "n", []byte("10"))
	if _, err := s.Delete(ctx, "n"); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Add(ctx, "n", 3); err != nil || got != 3 {
		t.Fatalf("Add after Delete = %d, %v; want 3 (a deleted counter restarts at 0)", got, err)
	}
}

func testDeleteThenSetWakesWaiter(t *testing.T, open Opener) {
	s, w := open(t), open(t)
	mustSet(t, w, "k", []byte("old"))
	if _, err := w.Delete(ctxLong(t), "k"); err != nil {
		t.Fatal(err)
	}
	ch := goGet(t, ctxLong(t), s, "k")
	notYet(t, ch, func(r result) string { return fmt.Sprintf("Get of a deleted key returned %q, %v", r.value, r.err) })
	mustSet(t, w, "k", []byte("new"))
	if r := recvResult(t, ch, "Get woken by Set after Delete"); r.err != nil || string(r.value) != "new" {
		t.Fatalf("Get = %q, %v; want %q", r.value, r.err, "new")
	}
}

func testSharedHandleConcurrent(t *testing.T, open Opener) {
	// Many goroutines share one handle: replies must reach the right caller.
	const goroutines, rounds = 32, 10
	s := open(t)
	ctx := ctxLong(t)
	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range rounds {
				key := fmt.Sprintf("g%d", g)
				want := fmt.Sprintf("g%d-r%d-%s", g, r, strings.Repeat("x", g*r))
				if err := s.Set(ctx, key, []byte(want)); err != nil {
					errs <- err
					return
				}
				got, err := s.Get(ctx, key)
				if err != nil {
					errs <- err
					return
				}
				if string(got) != want {
					errs <- fmt.Errorf("goroutine %d round %d: Get = %.40q; want %.40q (replies crossed?)", g, r, got, want)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

func testCancelOneOfMany(t *testing.T, open Opener) {
	s := open(t)
	ctxX, cancelX := context.WithCancel(context.Background())
	defer cancelX()
	chX := goGet(t, ctxX, s, "x")
	chY := goGet(t, ctxLong(t), s, "y")
	cancelX()
	if r := recvResult(t, chX, "cancelled Get"); !errors.Is(r.err, context.Canceled) {
		t.Fatalf("cancelled Get = %q, %v; want context.Canceled", r.value, r.err)
	}
	mustSet(t, open(t), "y", []byte("why"))
	if r := recvResult(t, chY, "Get sharing the handle with a cancelled one"); r.err != nil || string(r.value) != "why" {
		t.Fatalf("Get(y) = %q, %v; want %q", r.value, r.err, "why")
	}
	mustSet(t, open(t), "x", []byte("ex"))
	if got := mustGet(t, s, "x"); string(got) != "ex" {
		t.Fatalf("Get(x) after an earlier cancelled Get = %q; want %q", got, "ex")
	}
}

func testCloseUnblocks(t *testing.T, open Opener) {
	s := open(t)
	ctx := ctxLong(t)
	chGet := goGet(t, ctx, s, "never")
	chWait := goWait(t, ctx, s, "never", "also-never")
	// Make sure both calls are in flight before closing.
	select {
	case r := <-chGet:
		t.Fatalf("Get returned early: %q, %v", r.value, r.err)
	case err := <-chWait:
		t.Fatalf("Wait returned early: %v", err)
	case <-time.After(short):
	}
	start := time.Now()
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if r := recvResult(t, chGet, "Get blocked across Close"); !errors.Is(r.err, store.ErrClosed) {
		t.Fatalf("Get blocked across Close = %q, %v; want an error wrapping store.ErrClosed", r.value, r.err)
	}
	if err := recvResult(t, chWait, "Wait blocked across Close"); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("Wait blocked across Close = %v; want an error wrapping store.ErrClosed", err)
	}
	if d := time.Since(start); d > long/2 {
		t.Errorf("blocked calls took %v to notice Close", d)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close = %v; want nil", err)
	}
}

func testCallsAfterClose(t *testing.T, open Opener) {
	s := open(t)
	ctx := ctxLong(t)
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	calls := []struct {
		name string
		call func() error
	}{
		{"Set", func() error { return s.Set(ctx, "k", []byte("v")) }},
		{"Get", func() error { _, err := s.Get(ctx, "k"); return err }},
		{"Add", func() error { _, err := s.Add(ctx, "k", 1); return err }},
		{"CompareAndSwap", func() error { _, err := s.CompareAndSwap(ctx, "k", nil, []byte("v")); return err }},
		{"Wait", func() error { return s.Wait(ctx, "k") }},
		{"Delete", func() error { _, err := s.Delete(ctx, "k"); return err }},
	}
	for _, c := range calls {
		t.Run(c.name, func(t *testing.T) {
			if err := c.call(); !errors.Is(err, store.ErrClosed) {
				t.Fatalf("%s after Close = %v; want an error wrapping store.ErrClosed", c.name, err)
			}
		})
	}
}
