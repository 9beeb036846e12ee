//go:build !race

package gemm_test

const raceEnabled = false
