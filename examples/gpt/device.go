package main

import (
	"github.com/cohortml/cohort/device/cudatensor"
	"github.com/cohortml/cohort/tensor"
)

// openDevice parses -device ("" is the CPU) and, for a GPU, opens it: a
// machine without one fails here with one line, before any data is
// loaded.
func openDevice(s string) (tensor.Device, error) {
	if s == "" {
		return tensor.CPU, nil
	}
	dev, err := tensor.ParseDevice(s)
	if err != nil {
		return dev, err
	}
	if dev.Kind() == cudatensor.Kind {
		if err := cudatensor.Init(dev); err != nil {
			return dev, err
		}
	}
	return dev, nil
}
