package nn

import (
	"github.com/cohortml/cohort/tensor"
)

// To moves m's parameters (with their gradients) and buffers to dev, in
// place, as PyTorch's module.to(device): the module keeps its Vars and
// buffer tensors, now on dev. Tensors shared by several parameters or
// buffers stay shared. Move a model before building its optimizer (whose
// state is allocated on the parameters' device) and before wrapping it in
// anything that keeps views of its tensors.
func To(m Module, dev tensor.Device) {
	for _, p := range m.NamedParameters() {
		p.Param.To(dev) // a Var listed twice is moved once: the second call finds it there
	}
	moved := map[*tensor.Tensor]bool{}
	for _, b := range m.NamedBuffers() {
		if b.Buffer == nil || moved[b.Buffer] {
			continue
		}
		moved[b.Buffer] = true
		// The buffer's holder keeps its pointer: the moved tensor is
		// written over the old header.
		*b.Buffer = *b.Buffer.To(dev)
	}
}
