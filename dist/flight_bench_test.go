package dist

import (
	"testing"

	"cohort/dist/collective"
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
