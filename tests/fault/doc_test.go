// Package fault holds end-to-end failure tests of whole training jobs run
// the way users run them: `cohort run` launching examples/mnist as real
// processes. They are long, so they run only with COHORT_SOAK=1 (.ci/run
// sets it).
package fault
