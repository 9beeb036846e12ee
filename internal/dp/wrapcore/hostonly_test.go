package wrapcore

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/cohortml/cohort/internal/fakebackend"
	"github.com/cohortml/cohort/nn"
)

// TestHostOnly: a host model passes; one moved to a device is refused
// naming the tensor, the device and the wrapper.
func TestHostOnly(t *testing.T) {
	lin := nn.NewLinear(rand.New(rand.NewPCG(1, 2)), 3, 2, true)
	if err := HostOnly("zero", lin.NamedParameters(), nil); err != nil {
		t.Fatalf("host model: %v", err)
	}
	nn.To(lin, fakebackend.Device(0))
	err := HostOnly("zero", lin.NamedParameters(), nil)
	if err == nil || !strings.Contains(err.Error(), `"weight" is on fake:0`) || !strings.HasPrefix(err.Error(), "zero: ") {
		t.Errorf("device model: %v, want a zero error naming \"weight\" and fake:0", err)
	}
}
