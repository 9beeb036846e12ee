package native

import (
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/cohortml/cohort/distributed/collective"
)

// BenchmarkFlightRecord is the flight recorder's cost per op: enqueue
// (stack walk included), start and end.
func BenchmarkFlightRecord(b *testing.B) {
	var f flightRecorder
	o := &op{call: collective.Call{Kind: collective.AllReduce, Count: 1000}}
	for b.Loop() {
		o.seq++
		f.enqueue(o)
		f.start(o)
		f.end(o, nil)
	}
}

// fakeSubmit stands where submit calls enqueue.
//
//go:noinline
func fakeSubmit(f *flightRecorder, o *op) { f.enqueue(o) }

//go:noinline
func fakeIssuer(f *flightRecorder, o *op) (want []string) {
	fakeSubmit(f, o)
	var pcs [flightFrames]uintptr
	runtime.Callers(1, pcs[:]) // this function and its callers: what enqueue must have recorded
	return functions(pcs[:])
}

func functions(pcs []uintptr) []string {
	var names []string
	frames := runtime.CallersFrames(pcs)
	for {
		fr, more := frames.Next()
		names = append(names, fr.Function)
		if !more {
			return names
		}
	}
}

// TestFlightIssuer: enqueue records the frames above submit (the issuing
// function and its callers), as runtime.Callers names them, however deep
// the issuer sits.
func TestFlightIssuer(t *testing.T) {
	for _, depth := range []int{0, 1, 5} {
		var f flightRecorder
		o := &op{call: collective.Call{Kind: collective.AllReduce, Count: 1}}
		var want []string
		var nest func(int)
		nest = func(d int) {
			if d > 0 {
				nest(d - 1)
				return
			}
			want = fakeIssuer(&f, o)
		}
		nest(depth)
		got := functions(f.ring[0].pcs[:])
		if !slices.Equal(got[:1], []string{"github.com/cohortml/cohort/distributed/backend/native.fakeIssuer"}) || !slices.Equal(got, want) {
			t.Errorf("depth %d: recorded %q, want %q", depth, got, want)
		}
	}
	// On a goroutine's own stack, shallower than the frames kept.
	done := make(chan []string)
	var f flightRecorder
	go func() { fakeSubmit(&f, &op{}); done <- nil }()
	<-done
	if got := functions(f.ring[0].pcs[:]); len(got) == 0 || !strings.HasPrefix(got[0], "github.com/cohortml/cohort/distributed/backend/native.TestFlightIssuer") {
		t.Errorf("on a fresh goroutine: recorded %q", got)
	}
}
