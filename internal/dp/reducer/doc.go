// Package reducer is the gradient-bucket state machine shared by every
// data-parallel wrapper (ddp's all-reduce, zero's reduce-scatter): it
// tracks which parameters' gradients are ready in the current backward
// pass, starts each bucket's reduction in plan order as soon as all of
// its parameters are ready, finishes every bucket once backward returns,
// and rebuilds the buckets once, after the first synchronised step, in the
// order the gradients actually became ready.
//
// The Reducer does no I/O of its own. Its owner injects it through IO:
// bringing a gradient into its bucket (Take), starting a bucket's
// reduction (Start, which returns a Handle), agreeing on the rebuilt
// order across ranks (Agree) and laying the buckets out again (Replan).
// Tests drive it with text transcripts (testdata/*.txt): "ready 3",
// "backward done" in, "take 3", "start bucket 0", "finish bucket 0" out.
//
// Invariants, between calls: next ≤ len(buckets); buckets [0, next) have
// been started this step and no other; pending[k] counts the parameters of
// bucket k not yet taken this step; a bucket starts only when pending[k]
// is 0 and every earlier bucket has started, so every rank starts buckets
// in the same order.
//
// A Reducer is driven by one goroutine (the one running autograd's
// backward pass); it starts no goroutines.
package reducer
