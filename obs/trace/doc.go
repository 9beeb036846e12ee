// Package trace writes Chrome trace-event JSON (the format of
// chrome://tracing and Perfetto, https://docs.google.com/document/d/1CvAClvFfyA5R-PhYUmn5OOQtYMH4h6I0nSsKchNAySU):
// one file per rank, one process per rank, one thread per track (forward
// and backward on "compute", bucket all-reduces on "comm", loading on
// "data", pipeline send/recv on "p2p"). Spans that overlap on a track (two
// buckets in flight) get lanes of their own, so every thread holds
// properly nested complete ("X") events.
//
// Merge puts the files of every rank on one timeline; Validate checks a
// file against the format (the tests run it on what Tracer writes). A nil
// *Tracer is valid and records nothing, so instrumented code pays one
// nil check when tracing is off.
package trace
