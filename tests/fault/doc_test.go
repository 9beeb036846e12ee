// Package fault holds end-to-end failure tests of whole training jobs run
// the way users run them: `cohort run` launching examples/mnist and
// examples/gpt as real processes, killed with SIGKILL (the soak) or
// stopped by signals (the signal table). They are long, so they run only
// with COHORT_SOAK=1 (.ci/run sets it).
package fault
