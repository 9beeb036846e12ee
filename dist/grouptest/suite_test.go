package grouptest_test

import (
	"testing"

	"cohort/dist"
	"cohort/dist/disttest"
	"cohort/dist/grouptest"
)

// TestNative runs the suite on the native backend over an inproc mesh.
func TestNative(t *testing.T) {
	grouptest.Test(t, func(t *testing.T, world int, fn func(*testing.T, dist.ProcessGroup)) {
		disttest.Run(t, world, fn)
	}, grouptest.Config{})
}
