package ddp

import (
	"context"
	"testing"

	"github.com/cohortml/cohort/distributed"
	"github.com/cohortml/cohort/distributed/distributedtest"
	"github.com/cohortml/cohort/internal/dp/dptest"
	"github.com/cohortml/cohort/internal/fakebackend"
	"github.com/cohortml/cohort/nn"
)

func TestConformance(t *testing.T) {
	dptest.Run(t, dptest.Wrapper{Name: "ddp", Wrap: wrapForSuite})
}

// TestConformanceOnDevice runs the suite with every rank's model on a fake
// device (internal/fakebackend) and a group that takes device tensors
// (distributedtest.DeviceGroup, as the nccl backend's groups do): the
// buckets live on the device and the results equal one CPU process's.
func TestConformanceOnDevice(t *testing.T) {
	dptest.Run(t, dptest.Wrapper{Name: "ddp on a fake device", Wrap: wrapForSuite,
		Device: fakebackend.Device(0),
		Group:  func(pg distributed.ProcessGroup) distributed.ProcessGroup { return distributedtest.DeviceGroup(pg) }})
}

func wrapForSuite(ctx context.Context, mod nn.Module, _ []nn.Module, pg distributed.ProcessGroup, o dptest.Options) (dptest.Model, error) {
	m, err := WrapModule(ctx, mod, pg, Options{FindUnusedParameters: o.FindUnusedParameters, GradientAsBucketView: true})
	if err != nil {
		return nil, err
	}
	return dptest.NewReplica(m, mod, o)
}
