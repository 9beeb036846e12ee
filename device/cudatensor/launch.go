package cudatensor

import (
	"fmt"
	"strings"

	"github.com/cohortml/cohort/device/cuda"
	"github.com/cohortml/cohort/device/kernels"
)

// argKind is the class of a kernel parameter as the launch packs it: a
// device pointer, a C int, a long long or a float.
type argKind uint8

const (
	argPtr argKind = iota
	argI32
	argI64
	argF32
)

func (k argKind) String() string {
	return [...]string{"pointer", "int", "long long", "float"}[k]
}

// arg is one launch argument, tagged with its kind so that packing can be
// checked against the kernel table's declared parameters.
type arg struct {
	kind argKind
	bits uint64
}

func ptr(p cuda.DevicePtr) arg { return arg{argPtr, uint64(p)} }
func i32(v int) arg            { return arg{argI32, uint64(int64(v))} }
func i64(v int64) arg          { return arg{argI64, uint64(v)} }
func f32(v float32) arg        { return arg{argF32, uint64(float32bits(v))} }
func flag(b bool) arg {
	if b {
		return i32(1)
	}
	return i32(0)
}

// paramKind classifies a C parameter type of the kernel table.
func paramKind(cType string) (argKind, error) {
	t := strings.TrimSpace(strings.TrimPrefix(cType, "const "))
	switch {
	case strings.HasSuffix(t, "*"):
		return argPtr, nil
	case t == "int":
		return argI32, nil
	case t == "long long":
		return argI64, nil
	case t == "float":
		return argF32, nil
	}
	return 0, fmt.Errorf("cudatensor: parameter type %q has no packing", cType)
}

// pack checks args against k's declared parameters, one for one and kind
// for kind, and packs them in order for cuLaunchKernel.
func pack(k kernels.Kernel, args []arg) (*cuda.Args, error) {
	if len(args) != len(k.Params) {
		return nil, fmt.Errorf("cudatensor: kernel %s takes %d arguments, given %d", k.Name, len(k.Params), len(args))
	}
	var a cuda.Args
	for i, p := range k.Params {
		want, err := paramKind(p.Type)
		if err != nil {
			return nil, fmt.Errorf("cudatensor: kernel %s: %w", k.Name, err)
		}
		if args[i].kind != want {
			return nil, fmt.Errorf("cudatensor: kernel %s: argument %d (%s %s) given a %v", k.Name, i, p.Type, p.Name, args[i].kind)
		}
		switch want {
		case argPtr:
			a.Ptr(cuda.DevicePtr(args[i].bits))
		case argI32:
			a.Int(int(int64(args[i].bits)))
		case argI64:
			a.I64(int64(args[i].bits))
		case argF32:
			a.U32(uint32(args[i].bits))
		}
	}
	return &a, nil
}
