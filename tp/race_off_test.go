//go:build !race

package tp_test

const raceEnabled = false
