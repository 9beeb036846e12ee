package checkpoint

import (
	"encoding/binary"
	"math"
	"strings"
)

// unpickle runs the pickle opcodes of data (the subset torch.save emits
// for a state dict, protocols 2 to 5) and returns the object it builds.
// Globals other than an OrderedDict, torch's tensor and parameter
// rebuilders and the storage classes of torchStorages are refused, so
// nothing is ever called by name. Every length is bounded by the bytes
// left; the stack and memo grow at most by one entry per opcode.
func unpickle(data []byte) (out any, err error) {
	var (
		stack []any
		marks []int
		memo  = map[uint32]any{}
		pos   int
	)
	// The readers below stop the run on malformed input by panicking with
	// a pickleError, which unpickle returns; any other panic goes on.
	defer func() {
		if r := recover(); r != nil {
			pe, ok := r.(pickleError)
			if !ok {
				panic(r)
			}
			out, err = nil, pe.err
		}
	}()
	need := func(n int) []byte {
		if n < 0 || n > len(data)-pos {
			panic(pickleError{torchErr("data.pkl: %d bytes wanted at byte %d of %d", n, pos, len(data))})
		}
		b := data[pos : pos+n]
		pos += n
		return b
	}
	le := func(n int) uint64 { // an n-byte little-endian unsigned integer
		var x uint64
		for i, c := range need(n) {
			x |= uint64(c) << (8 * i)
		}
		return x
	}
	pop := func() any {
		if len(stack) == 0 || (len(marks) > 0 && len(stack) == marks[len(marks)-1]) {
			panic(pickleError{torchErr("data.pkl: stack underflow at byte %d", pos)})
		}
		v := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		return v
	}
	popMark := func() []any {
		if len(marks) == 0 {
			panic(pickleError{torchErr("data.pkl: no mark at byte %d", pos)})
		}
		m := marks[len(marks)-1]
		marks = marks[:len(marks)-1]
		items := append([]any(nil), stack[m:]...)
		stack = stack[:m]
		return items
	}
	line := func() string {
		i := strings.IndexByte(string(data[pos:]), '\n')
		if i < 0 {
			panic(pickleError{torchErr("data.pkl: unterminated line at byte %d", pos)})
		}
		s := string(data[pos : pos+i])
		pos += i + 1
		return s
	}
	for {
		if pos >= len(data) {
			return nil, torchErr("data.pkl: no STOP opcode")
		}
		op := data[pos]
		pos++
		switch op {
		case 0x80: // PROTO
			if p := need(1)[0]; p < 2 || p > 5 {
				return nil, torchErr("data.pkl: pickle protocol %d", p)
			}
		case 0x95: // FRAME
			need(8)
		case '.': // STOP
			return pop(), nil
		case '(': // MARK
			marks = append(marks, len(stack))
		case ')': // EMPTY_TUPLE
			stack = append(stack, []any{})
		case 't': // TUPLE
			stack = append(stack, popMark())
		case 0x85, 0x86, 0x87: // TUPLE1, TUPLE2, TUPLE3
			items := make([]any, int(op-0x84))
			for i := len(items) - 1; i >= 0; i-- {
				items[i] = pop()
			}
			stack = append(stack, items)
		case '}': // EMPTY_DICT
			stack = append(stack, &pyDict{vals: map[any]any{}})
		case ']': // EMPTY_LIST
			stack = append(stack, &[]any{})
		case 's', 'u': // SETITEM, SETITEMS
			var kv []any
			if op == 's' {
				v := pop()
				kv = []any{pop(), v}
			} else {
				kv = popMark()
			}
			if len(stack) == 0 || len(kv)%2 != 0 {
				return nil, torchErr("data.pkl: SETITEM(S) without a dict or with an odd item count at byte %d", pos)
			}
			d, ok := stack[len(stack)-1].(*pyDict)
			if !ok {
				return nil, torchErr("data.pkl: SETITEM(S) on %T at byte %d", stack[len(stack)-1], pos)
			}
			for i := 0; i < len(kv); i += 2 {
				k := kv[i]
				switch k.(type) {
				case string, int64, bool, nil, float64:
				default:
					return nil, torchErr("data.pkl: dict key of type %T at byte %d", k, pos)
				}
				if _, ok := d.vals[k]; !ok {
					d.keys = append(d.keys, k)
				}
				d.vals[k] = kv[i+1]
			}
		case 'a', 'e': // APPEND, APPENDS
			var items []any
			if op == 'a' {
				items = []any{pop()}
			} else {
				items = popMark()
			}
			if len(stack) == 0 {
				return nil, torchErr("data.pkl: APPEND without a list at byte %d", pos)
			}
			l, ok := stack[len(stack)-1].(*[]any)
			if !ok {
				return nil, torchErr("data.pkl: APPEND on %T at byte %d", stack[len(stack)-1], pos)
			}
			*l = append(*l, items...)
		case 'q', 'r', 0x94: // BINPUT, LONG_BINPUT, MEMOIZE
			idx := uint32(len(memo))
			switch op {
			case 'q':
				idx = uint32(le(1))
			case 'r':
				idx = uint32(le(4))
			}
			if len(stack) == 0 {
				return nil, torchErr("data.pkl: memo put on an empty stack at byte %d", pos)
			}
			memo[idx] = stack[len(stack)-1]
		case 'h', 'j': // BINGET, LONG_BINGET
			var idx uint32
			if op == 'h' {
				idx = uint32(le(1))
			} else {
				idx = uint32(le(4))
			}
			v, ok := memo[idx]
			if !ok {
				return nil, torchErr("data.pkl: memo %d unset at byte %d", idx, pos)
			}
			stack = append(stack, v)
		case 'c': // GLOBAL
			mod := line()
			stack = append(stack, pyGlobal{mod, line()})
		case 0x93: // STACK_GLOBAL
			n := pop()
			m := pop()
			ms, ok1 := m.(string)
			ns, ok2 := n.(string)
			if !ok1 || !ok2 {
				return nil, torchErr("data.pkl: STACK_GLOBAL of %T, %T", m, n)
			}
			stack = append(stack, pyGlobal{ms, ns})
		case 'X', 0x8c, 0x8d: // BINUNICODE, SHORT_BINUNICODE, BINUNICODE8
			var n uint64
			switch op {
			case 'X':
				n = le(4)
			case 0x8c:
				n = le(1)
			default:
				n = le(8)
			}
			if n > uint64(len(data)) {
				return nil, torchErr("data.pkl: string of %d bytes at byte %d", n, pos)
			}
			stack = append(stack, string(need(int(n))))
		case 'J': // BININT
			stack = append(stack, int64(int32(le(4))))
		case 'K': // BININT1
			stack = append(stack, int64(le(1)))
		case 'M': // BININT2
			stack = append(stack, int64(le(2)))
		case 0x8a: // LONG1
			n := need(1)[0]
			if n > 8 {
				return nil, torchErr("data.pkl: %d-byte integer at byte %d", n, pos)
			}
			v := need(int(n))
			var x int64
			for i := len(v) - 1; i >= 0; i-- {
				x = x<<8 | int64(v[i])
			}
			if n := len(v); n > 0 && n < 8 && v[n-1]&0x80 != 0 {
				x -= 1 << (8 * n)
			}
			stack = append(stack, x)
		case 'G': // BINFLOAT
			stack = append(stack, math.Float64frombits(binary.BigEndian.Uint64(need(8))))
		case 'N':
			stack = append(stack, nil)
		case 0x88, 0x89: // NEWTRUE, NEWFALSE
			stack = append(stack, op == 0x88)
		case 'Q': // BINPERSID
			s, err := persistentStorage(pop())
			if err != nil {
				return nil, err
			}
			stack = append(stack, s)
		case 'R': // REDUCE
			args := pop()
			v, err := reduce(pop(), args)
			if err != nil {
				return nil, err
			}
			stack = append(stack, v)
		case 'b': // BUILD: the OrderedDict's _metadata; tensors' state
			pop()
			if len(stack) == 0 {
				return nil, torchErr("data.pkl: BUILD on an empty stack at byte %d", pos)
			}
		default:
			return nil, torchErr("data.pkl: unsupported pickle opcode %#02x at byte %d", op, pos-1)
		}
	}
}

// pickleError carries the error of malformed pickle input from the
// readers inside unpickle (a panic) to its return.
type pickleError struct{ err error }

// persistentStorage decodes a storage's persistent id
// ("storage", torch.<T>Storage, key, location, numel).
func persistentStorage(v any) (pyStorage, error) {
	t, ok := v.([]any)
	if !ok || len(t) != 5 || t[0] != "storage" {
		return pyStorage{}, torchErr("data.pkl: persistent id %v is not a storage", v)
	}
	g, ok1 := t[1].(pyGlobal)
	key, ok2 := t[2].(string)
	numel, ok3 := t[4].(int64)
	if !ok1 || !ok2 || !ok3 || numel < 0 || strings.ContainsAny(key, "/\\") || key == "" || key == "." || key == ".." {
		return pyStorage{}, torchErr("data.pkl: malformed storage id %v", v)
	}
	if g.module != "torch" {
		return pyStorage{}, torchErr("data.pkl: storage type %s.%s", g.module, g.name)
	}
	dt, ok := torchStorages[g.name]
	if !ok {
		return pyStorage{}, torchErr("data.pkl: storage %s of type torch.%s: float32, bfloat16, float16 and float64 only", key, g.name)
	}
	return pyStorage{dtype: dt, key: key, numel: numel}, nil
}

// reduce applies one of the globals a state dict uses to args.
func reduce(fn, args any) (any, error) {
	g, ok := fn.(pyGlobal)
	a, ok2 := args.([]any)
	if !ok || !ok2 {
		return nil, torchErr("data.pkl: REDUCE of %T with %T", fn, args)
	}
	switch g {
	case pyGlobal{"collections", "OrderedDict"}:
		if len(a) != 0 {
			return nil, torchErr("data.pkl: OrderedDict with %d arguments", len(a))
		}
		return &pyDict{vals: map[any]any{}}, nil
	case pyGlobal{"torch._utils", "_rebuild_parameter"}:
		if len(a) < 1 {
			return nil, torchErr("data.pkl: _rebuild_parameter without data")
		}
		if _, ok := a[0].(TorchTensor); !ok {
			return nil, torchErr("data.pkl: _rebuild_parameter of %T", a[0])
		}
		return a[0], nil
	case pyGlobal{"torch._utils", "_rebuild_tensor_v2"}:
		if len(a) < 4 {
			return nil, torchErr("data.pkl: _rebuild_tensor_v2 with %d arguments", len(a))
		}
		s, ok := a[0].(pyStorage)
		off, ok2 := a[1].(int64)
		shape, ok3 := ints(a[2])
		stride, ok4 := ints(a[3])
		if !ok || !ok2 || !ok3 || !ok4 {
			return nil, torchErr("data.pkl: _rebuild_tensor_v2%v: want (storage, offset, size, stride, …)", a)
		}
		return TorchTensor{DType: s.dtype, Shape: shape, Stride: stride, Offset: off, key: s.key, numel: s.numel}, nil
	}
	return nil, torchErr("data.pkl: unsupported global %s.%s", g.module, g.name)
}

func ints(v any) ([]int, bool) {
	t, ok := v.([]any)
	if !ok {
		return nil, false
	}
	out := make([]int, len(t))
	for i, x := range t {
		n, ok := x.(int64)
		if !ok || n < 0 || n > math.MaxInt32 {
			return nil, false
		}
		out[i] = int(n)
	}
	return out, true
}
