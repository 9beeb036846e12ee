//go:build race

package autograd

// raceEnabled: the race detector changes what allocates.
const raceEnabled = true
