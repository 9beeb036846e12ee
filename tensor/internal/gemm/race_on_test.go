//go:build race

package gemm_test

// raceEnabled: the race detector makes sync.Pool drop items at random, so
// allocation counts are meaningless.
const raceEnabled = true
