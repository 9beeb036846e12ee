//go:build race

package tp_test

// raceEnabled: the race detector changes what allocates.
const raceEnabled = true
