package nn

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/cohortml/cohort/tensor"
)

// ErrStateDict is wrapped by every error LoadStateDict returns.
var ErrStateDict = errors.New("nn: state dict does not match the module")

// StateDict returns m's parameters and buffers by name. The tensors alias
// the module's live values: clone them for a snapshot that later training
// must not change.
func StateDict(m Module) map[string]*tensor.Tensor {
	sd := map[string]*tensor.Tensor{}
	for _, p := range m.NamedParameters() {
		sd[p.Name] = p.Param.Value
	}
	for _, b := range m.NamedBuffers() {
		sd[b.Name] = b.Buffer
	}
	return sd
}

// LoadStateDict copies sd's tensors into m's parameters and buffers of the
// same name (the module keeps its own tensors, so views of them, such as
// flat parameter buffers, stay valid). Every key must match: a missing
// key, an unexpected key or a shape mismatch is reported, all of them in
// one error wrapping ErrStateDict, and then nothing is copied.
func LoadStateDict(m Module, sd map[string]*tensor.Tensor) error {
	dst := map[string]*tensor.Tensor{}
	for _, p := range m.NamedParameters() {
		dst[p.Name] = p.Param.Value
	}
	for _, b := range m.NamedBuffers() {
		dst[b.Name] = b.Buffer
	}
	var problems []string
	for _, name := range slices.Sorted(maps.Keys(dst)) {
		src, ok := sd[name]
		switch {
		case !ok:
			problems = append(problems, fmt.Sprintf("missing key %q", name))
		case src == nil:
			problems = append(problems, fmt.Sprintf("key %q: nil tensor", name))
		case !src.SameShape(dst[name]):
			problems = append(problems, fmt.Sprintf("key %q: shape %v, module has %v", name, src.Shape(), dst[name].Shape()))
		}
	}
	for _, name := range slices.Sorted(maps.Keys(sd)) {
		if _, ok := dst[name]; !ok {
			problems = append(problems, fmt.Sprintf("unexpected key %q", name))
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("%w: %s", ErrStateDict, strings.Join(problems, "; "))
	}
	for name, t := range dst {
		t.CopyFrom(sd[name].To(t.Device())) // a host state dict is moved to the module's device
	}
	return nil
}
