// Package parallel trains the GPT recipe's model on a layout chosen at run
// time, as one concrete type: pure data parallelism through ddp (every
// rank holds the whole model; the bucketed gradient all-reduce overlaps
// backward), any layout with pipeline or tensor parallelism through
// package layout (each rank holds its stages' shards).
//
// Every rank calls the same methods in the same order: most communicate.
// The optimizer stays the caller's, built over Parameters: a program's
// step reads as forward-backward, clip, optimizer step.
package parallel
