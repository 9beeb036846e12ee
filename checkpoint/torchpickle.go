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
func unpickle(data []byte) (any, error) {
	var (
		stack []any
		marks []int
		memo  = map[uint32]any{}
		pos   int
	)
	need := func(n int) ([]byte, error) {
		if n < 0 || n > len(data)-pos {
			return nil, torchErr("data.pkl: %d bytes wanted at byte %d of %d", n, pos, len(data))
		}
		b := data[pos : pos+n]
		pos += n
		return b, nil
	}
	pop := func() (any, error) {
		if len(stack) == 0 || (len(marks) > 0 && len(stack) == marks[len(marks)-1]) {
			return nil, torchErr("data.pkl: stack underflow at byte %d", pos)
		}
		v := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		return v, nil
	}
	popMark := func() ([]any, error) {
		if len(marks) == 0 {
			return nil, torchErr("data.pkl: no mark at byte %d", pos)
		}
		m := marks[len(marks)-1]
		marks = marks[:len(marks)-1]
		items := append([]any(nil), stack[m:]...)
		stack = stack[:m]
		return items, nil
	}
	line := func() (string, error) {
		i := strings.IndexByte(string(data[pos:]), '\n')
		if i < 0 {
			return "", torchErr("data.pkl: unterminated line at byte %d", pos)
		}
		s := string(data[pos : pos+i])
		pos += i + 1
		return s, nil
	}
	for {
		if pos >= len(data) {
			return nil, torchErr("data.pkl: no STOP opcode")
		}
		op := data[pos]
		pos++
		switch op {
		case 0x80: // PROTO
			b, err := need(1)
			if err != nil {
				return nil, err
			}
			if b[0] < 2 || b[0] > 5 {
				return nil, torchErr("data.pkl: pickle protocol %d", b[0])
			}
		case 0x95: // FRAME
			if _, err := need(8); err != nil {
				return nil, err
			}
		case '.': // STOP
			v, err := pop()
			if err != nil {
				return nil, err
			}
			return v, nil
		case '(': // MARK
			marks = append(marks, len(stack))
		case ')': // EMPTY_TUPLE
			stack = append(stack, []any{})
		case 't': // TUPLE
			items, err := popMark()
			if err != nil {
				return nil, err
			}
			stack = append(stack, items)
		case 0x85, 0x86, 0x87: // TUPLE1, TUPLE2, TUPLE3
			n := int(op - 0x84)
			items := make([]any, n)
			for i := n - 1; i >= 0; i-- {
				v, err := pop()
				if err != nil {
					return nil, err
				}
				items[i] = v
			}
			stack = append(stack, items)
		case '}': // EMPTY_DICT
			stack = append(stack, &pyDict{vals: map[any]any{}})
		case ']': // EMPTY_LIST
			stack = append(stack, &[]any{})
		case 's', 'u': // SETITEM, SETITEMS
			var kv []any
			if op == 's' {
				v, err := pop()
				if err != nil {
					return nil, err
				}
				k, err := pop()
				if err != nil {
					return nil, err
				}
				kv = []any{k, v}
			} else {
				var err error
				if kv, err = popMark(); err != nil {
					return nil, err
				}
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
				v, err := pop()
				if err != nil {
					return nil, err
				}
				items = []any{v}
			} else {
				var err error
				if items, err = popMark(); err != nil {
					return nil, err
				}
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
			var idx uint32
			switch op {
			case 'q':
				b, err := need(1)
				if err != nil {
					return nil, err
				}
				idx = uint32(b[0])
			case 'r':
				b, err := need(4)
				if err != nil {
					return nil, err
				}
				idx = binary.LittleEndian.Uint32(b)
			default:
				idx = uint32(len(memo))
			}
			if len(stack) == 0 {
				return nil, torchErr("data.pkl: memo put on an empty stack at byte %d", pos)
			}
			memo[idx] = stack[len(stack)-1]
		case 'h', 'j': // BINGET, LONG_BINGET
			var idx uint32
			if op == 'h' {
				b, err := need(1)
				if err != nil {
					return nil, err
				}
				idx = uint32(b[0])
			} else {
				b, err := need(4)
				if err != nil {
					return nil, err
				}
				idx = binary.LittleEndian.Uint32(b)
			}
			v, ok := memo[idx]
			if !ok {
				return nil, torchErr("data.pkl: memo %d unset at byte %d", idx, pos)
			}
			stack = append(stack, v)
		case 'c': // GLOBAL
			mod, err := line()
			if err != nil {
				return nil, err
			}
			name, err := line()
			if err != nil {
				return nil, err
			}
			stack = append(stack, pyGlobal{mod, name})
		case 0x93: // STACK_GLOBAL
			n, err := pop()
			if err != nil {
				return nil, err
			}
			m, err := pop()
			if err != nil {
				return nil, err
			}
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
				b, err := need(4)
				if err != nil {
					return nil, err
				}
				n = uint64(binary.LittleEndian.Uint32(b))
			case 0x8c:
				b, err := need(1)
				if err != nil {
					return nil, err
				}
				n = uint64(b[0])
			default:
				b, err := need(8)
				if err != nil {
					return nil, err
				}
				n = binary.LittleEndian.Uint64(b)
			}
			if n > uint64(len(data)) {
				return nil, torchErr("data.pkl: string of %d bytes at byte %d", n, pos)
			}
			b, err := need(int(n))
			if err != nil {
				return nil, err
			}
			stack = append(stack, string(b))
		case 'J': // BININT
			b, err := need(4)
			if err != nil {
				return nil, err
			}
			stack = append(stack, int64(int32(binary.LittleEndian.Uint32(b))))
		case 'K': // BININT1
			b, err := need(1)
			if err != nil {
				return nil, err
			}
			stack = append(stack, int64(b[0]))
		case 'M': // BININT2
			b, err := need(2)
			if err != nil {
				return nil, err
			}
			stack = append(stack, int64(binary.LittleEndian.Uint16(b)))
		case 0x8a: // LONG1
			b, err := need(1)
			if err != nil {
				return nil, err
			}
			if b[0] > 8 {
				return nil, torchErr("data.pkl: %d-byte integer at byte %d", b[0], pos)
			}
			v, err := need(int(b[0]))
			if err != nil {
				return nil, err
			}
			var x int64
			for i := len(v) - 1; i >= 0; i-- {
				x = x<<8 | int64(v[i])
			}
			if n := len(v); n > 0 && n < 8 && v[n-1]&0x80 != 0 {
				x -= 1 << (8 * n)
			}
			stack = append(stack, x)
		case 'G': // BINFLOAT
			b, err := need(8)
			if err != nil {
				return nil, err
			}
			stack = append(stack, math.Float64frombits(binary.BigEndian.Uint64(b)))
		case 'N':
			stack = append(stack, nil)
		case 0x88, 0x89: // NEWTRUE, NEWFALSE
			stack = append(stack, op == 0x88)
		case 'Q': // BINPERSID
			v, err := pop()
			if err != nil {
				return nil, err
			}
			s, err := persistentStorage(v)
			if err != nil {
				return nil, err
			}
			stack = append(stack, s)
		case 'R': // REDUCE
			args, err := pop()
			if err != nil {
				return nil, err
			}
			fn, err := pop()
			if err != nil {
				return nil, err
			}
			v, err := reduce(fn, args)
			if err != nil {
				return nil, err
			}
			stack = append(stack, v)
		case 'b': // BUILD: the OrderedDict's _metadata; tensors' state
			if _, err := pop(); err != nil {
				return nil, err
			}
			if len(stack) == 0 {
				return nil, torchErr("data.pkl: BUILD on an empty stack at byte %d", pos)
			}
		default:
			return nil, torchErr("data.pkl: unsupported pickle opcode %#02x at byte %d", op, pos-1)
		}
	}
}

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
