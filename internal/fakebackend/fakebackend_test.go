package fakebackend_test

import (
	"testing"

	"github.com/cohortml/cohort/internal/fakebackend"
	"github.com/cohortml/cohort/tensor/devicetest"
)

// The fake runs the CPU twins, so it must match them bit for bit.
func TestConformance(t *testing.T) {
	devicetest.RunWith(t, fakebackend.Device(0), devicetest.Options{RelTol: -1})
}
