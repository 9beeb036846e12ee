package optim

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/cohortml/cohort/tensor"
)

// StateDict is the serialisable state of an optimizer or a Scheduler:
// named tensors and named scalars. Names depend only on the parameter
// layout (the groups and their order), never on memory addresses:
//
//	state.<i>.<buffer>   tensor: per-parameter state (momentum_buffer,
//	                     exp_avg, exp_avg_sq, max_exp_avg_sq); i counts
//	                     parameters across groups in order, like PyTorch
//	state.<i>.step       scalar: updates applied to parameter i
//	group.<g>.lr         scalar: learning rate of group g
//	group.<g>.weight_decay, group.<g>.params (its parameter count)
//	<option>             scalar: momentum, beta1, … (booleans as 0 or 1)
type StateDict struct {
	Kind    string // "sgd", "adam", "adamw" or "scheduler"
	Tensors map[string]*tensor.Tensor
	Scalars map[string]float64
}

func newStateDict(kind string) *StateDict {
	return &StateDict{Kind: kind, Tensors: map[string]*tensor.Tensor{}, Scalars: map[string]float64{}}
}

func stateKey(i int, name string) string { return "state." + strconv.Itoa(i) + "." + name }

// putCommon adds the group and step scalars.
func (b *base) putCommon(sd *StateDict) {
	for g, gr := range b.groups {
		pre := "group." + strconv.Itoa(g) + "."
		sd.Scalars[pre+"lr"] = gr.LR
		sd.Scalars[pre+"weight_decay"] = gr.WeightDecay
		sd.Scalars[pre+"params"] = float64(len(gr.Params))
	}
	for i, s := range b.steps {
		sd.Scalars[stateKey(i, "step")] = float64(s)
	}
}

// putTensor adds per-parameter buffer data of parameter i, aliased and
// shaped like the parameter.
func (b *base) putTensor(sd *StateDict, i int, name string, data []float32) {
	sd.Tensors[stateKey(i, name)] = tensor.FromSlice(data, b.params[i].Value.Shape()...)
}

// checkLoad validates sd against own (the optimizer's live state dict):
// same kind, same keys, same tensor shapes, valid common scalars. Errors
// name the first bad key in sorted order.
func (b *base) checkLoad(own, sd *StateDict) error {
	op := b.name + ".LoadStateDict"
	if sd == nil {
		return invalid(op, "nil state dict")
	}
	if sd.Kind != own.Kind {
		return invalid(op, "state dict is of kind %q, want %q", sd.Kind, own.Kind)
	}
	if err := sameKeys(op, "tensor", own.Tensors, sd.Tensors); err != nil {
		return err
	}
	if err := sameKeys(op, "scalar", own.Scalars, sd.Scalars); err != nil {
		return err
	}
	for _, k := range slices.Sorted(maps.Keys(sd.Tensors)) {
		t, want := sd.Tensors[k], own.Tensors[k]
		if t == nil || !t.SameShape(want) {
			var shape []int
			if t != nil {
				shape = t.Shape()
			}
			return invalid(op, "key %q: shape %v, want %v", k, shape, want.Shape())
		}
	}
	for _, k := range slices.Sorted(maps.Keys(sd.Scalars)) {
		v := sd.Scalars[k]
		switch {
		case strings.HasSuffix(k, ".step"):
			if !(v >= 0 && v <= 1<<53 && v == math.Trunc(v)) {
				return invalid(op, "key %q = %v, want a whole number >= 0", k, v)
			}
		case strings.HasSuffix(k, ".params"):
			if v != own.Scalars[k] {
				return invalid(op, "key %q = %v, but the group has %v parameters", k, v, own.Scalars[k])
			}
		case strings.HasPrefix(k, "group."):
			if err := checkHyper(op, "key "+strconv.Quote(k), v); err != nil {
				return err
			}
		}
	}
	return nil
}

// applyLoad copies a checked sd into the live state: tensors into the
// buffers own aliases, then the common scalars.
func (b *base) applyLoad(own, sd *StateDict) {
	for k, t := range sd.Tensors {
		if d := own.Tensors[k]; !d.Device().IsCPU() {
			d.CopyFrom(t.To(d.Device())) // state on a device: moved there
			continue
		}
		dst := own.Tensors[k].Data()
		if t.IsContiguous() {
			copy(dst, t.Data())
		} else {
			copy(dst, t.Contiguous().Data())
		}
	}
	for g := range b.groups {
		pre := "group." + strconv.Itoa(g) + "."
		b.groups[g].LR = sd.Scalars[pre+"lr"]
		b.groups[g].WeightDecay = sd.Scalars[pre+"weight_decay"]
	}
	for i := range b.steps {
		b.steps[i] = int64(sd.Scalars[stateKey(i, "step")])
	}
}

// sameKeys reports the first key (sorted) present in one map but not the other.
func sameKeys[V any](op, what string, own, got map[string]V) error {
	for _, k := range slices.Sorted(maps.Keys(got)) {
		if _, ok := own[k]; !ok {
			return invalid(op, "unknown %s key %q", what, k)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(own)) {
		if _, ok := got[k]; !ok {
			return invalid(op, "missing %s key %q", what, k)
		}
	}
	return nil
}

// boolScalar encodes a flag as 0 or 1.
func boolScalar(v bool) float64 {
	if v {
		return 1
	}
	return 0
}

// optionScalar ties an option to its StateDict scalar: a number, or a
// flag saved as 0 or 1.
type optionScalar struct {
	key  string
	num  *float64
	flag *bool
}

// putOptions saves the options into sd's scalars.
func putOptions(sd *StateDict, opts []optionScalar) {
	for _, o := range opts {
		if o.flag != nil {
			sd.Scalars[o.key] = boolScalar(*o.flag)
		} else {
			sd.Scalars[o.key] = *o.num
		}
	}
}

// options is an optimizer's options as its state dict holds them.
type options[O any] interface {
	*O
	scalars() []optionScalar
	validate(op string) error
	// buffers names the option that decides which buffers the optimizer
	// keeps: its key, its value, and whether it asks for the optional
	// buffers (AMSGrad's maximum, SGD's momentum).
	buffers() (key string, value any, on bool)
}

// loadStateDict is an optimizer's LoadStateDict: it checks sd against own
// (the optimizer's StateDict), reads and validates the options, checks
// that they ask for the buffers opts has, then restores the state and *opts.
func loadStateDict[O any, P options[O]](b *base, opts P, own, sd *StateDict) error {
	op := b.name + ".LoadStateDict"
	if err := b.checkLoad(own, sd); err != nil {
		return err
	}
	var o O
	if err := loadOptions(op, sd, P(&o).scalars()); err != nil {
		return err
	}
	if err := P(&o).validate(op); err != nil {
		return err
	}
	key, _, on := P(&o).buffers()
	if _, built, was := opts.buffers(); on != was {
		return invalid(op, "key %q = %v, but this optimizer was built with %s %v (buffers differ)", key, sd.Scalars[key], key, built)
	}
	b.applyLoad(own, sd)
	*opts = o
	return nil
}

// loadOptions reads the options back from sd's scalars, in order; a flag
// that is neither 0 nor 1 is an error.
func loadOptions(op string, sd *StateDict, opts []optionScalar) error {
	for _, o := range opts {
		if o.flag == nil {
			*o.num = sd.Scalars[o.key]
			continue
		}
		v, err := scalarBool(op, sd, o.key)
		if err != nil {
			return err
		}
		*o.flag = v
	}
	return nil
}

// scalarBool decodes a flag, rejecting anything but 0 and 1.
func scalarBool(op string, sd *StateDict, key string) (bool, error) {
	switch v := sd.Scalars[key]; v {
	case 0, 1:
		return v == 1, nil
	default:
		return false, invalid(op, "key %q = %v, want 0 or 1", key, v)
	}
}

// String summarises the dict for debugging: kind and key counts.
func (sd *StateDict) String() string {
	return fmt.Sprintf("optim.StateDict{%s: %d tensors, %d scalars}", sd.Kind, len(sd.Tensors), len(sd.Scalars))
}
