package native_test

import (
	"testing"

	"github.com/cohortml/cohort/distributed"
	"github.com/cohortml/cohort/distributed/distributedtest"
	"github.com/cohortml/cohort/distributed/grouptest"
)

// TestConformance runs the suite on the native backend over an inproc mesh.
func TestConformance(t *testing.T) {
	grouptest.Test(t, func(t *testing.T, world int, fn func(*testing.T, distributed.ProcessGroup)) {
		distributedtest.Run(t, world, fn)
	}, grouptest.Config{})
}
