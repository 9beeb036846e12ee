package checkpoint

// PyTorch's torch.save format (the zip archive of PyTorch 1.6 and later):
//
//	<prefix>/data.pkl     the pickled object: for a state dict an
//	                      OrderedDict of name → tensor, each tensor
//	                      torch._utils._rebuild_tensor_v2(storage, offset,
//	                      size, stride, requires_grad, hooks), its storage
//	                      a persistent id ("storage", torch.<T>Storage,
//	                      key, location, numel)
//	<prefix>/data/<key>   each storage's elements, little-endian
//	<prefix>/version      the format version ("3")
//
// The reader runs the subset of the pickle machine (protocols 2 to 5)
// that torch.save of a state dict emits, and refuses any other global:
// nothing in the file is executed. It bounds every length by the bytes
// the file has. The writer produces what torch.save writes for a state
// dict, storage entries stored uncompressed at 64-byte aligned offsets.

import (
	"archive/zip"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"os"
	"path"
	"sort"
	"strconv"
	"strings"

	"github.com/cohortml/cohort/nn"
	"github.com/cohortml/cohort/tensor"
)

// ErrTorchFormat is wrapped by every error about a malformed or
// unsupported torch.save file.
var ErrTorchFormat = errors.New("checkpoint: malformed or unsupported torch.save file")

func torchErr(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrTorchFormat, fmt.Sprintf(format, args...))
}

// torchStorages maps a storage class (torch.<name>) to the safetensors
// dtype of its elements.
var torchStorages = map[string]DType{
	"FloatStorage":    F32,
	"BFloat16Storage": BF16,
	"HalfStorage":     F16,
	"DoubleStorage":   F64,
}

// TorchTensor is one tensor of a torch.save'd state dict.
type TorchTensor struct {
	DType  DType // of its storage: F32, BF16, F16 or F64
	Shape  []int
	Stride []int
	Offset int64  // in elements, into its storage
	key    string // the storage's record, data/<key>
	numel  int64  // the storage's length in elements
}

// TorchFile reads the tensors of a state dict saved with torch.save.
type TorchFile struct {
	Tensors map[string]TorchTensor
	records map[string]*zip.File
	prefix  string
	size    int64 // of the file
}

// shapes returns every tensor's shape by name.
func (f *TorchFile) shapes() map[string][]int {
	out := make(map[string][]int, len(f.Tensors))
	for k, t := range f.Tensors {
		out[k] = t.Shape
	}
	return out
}

type pyGlobal struct{ module, name string }

type pyDict struct {
	keys []any
	vals map[any]any
}

type pyStorage struct {
	dtype DType
	key   string
	numel int64
}

type pyMark struct{}

// OpenTorch reads the index of the torch.save file r of size bytes.
func OpenTorch(r io.ReaderAt, size int64) (*TorchFile, error) {
	zr, err := zip.NewReader(r, size)
	if err != nil {
		return nil, torchErr("not a zip archive: %v", err)
	}
	f := &TorchFile{records: map[string]*zip.File{}, size: size}
	for _, z := range zr.File {
		i := strings.IndexByte(z.Name, '/')
		if i < 0 {
			return nil, torchErr("record %q is outside the archive's top directory", z.Name)
		}
		if f.prefix == "" {
			f.prefix = z.Name[:i]
		}
		f.records[z.Name[i+1:]] = z
	}
	pk, ok := f.records["data.pkl"]
	if !ok {
		return nil, torchErr("no data.pkl record (a file of torch.save before 1.6, or not PyTorch's)")
	}
	if pk.UncompressedSize64 > uint64(MaxHeaderBytes) || pk.UncompressedSize64 > uint64(size)*1032 {
		return nil, torchErr("data.pkl of %d bytes", pk.UncompressedSize64)
	}
	pr, err := pk.Open()
	if err != nil {
		return nil, torchErr("data.pkl: %v", err)
	}
	data, err := io.ReadAll(io.LimitReader(pr, int64(pk.UncompressedSize64)))
	pr.Close()
	if err != nil {
		return nil, torchErr("data.pkl: %v", err)
	}
	v, err := unpickle(data)
	if err != nil {
		return nil, err
	}
	d, ok := v.(*pyDict)
	if !ok {
		return nil, torchErr("data.pkl holds %T, not a state dict", v)
	}
	f.Tensors = map[string]TorchTensor{}
	for _, k := range d.keys {
		name, ok := k.(string)
		if !ok {
			return nil, torchErr("state dict key %v is not a string", k)
		}
		t, ok := d.vals[k].(TorchTensor)
		if !ok {
			return nil, torchErr("state dict entry %q is %T, not a tensor", name, d.vals[k])
		}
		if err := f.check(name, t); err != nil {
			return nil, err
		}
		f.Tensors[name] = t
	}
	return f, nil
}

// check validates t's view against its storage record.
func (f *TorchFile) check(name string, t TorchTensor) error {
	z, ok := f.records["data/"+t.key]
	if !ok {
		return torchErr("tensor %q: no record data/%s", name, t.key)
	}
	// A zip header may claim any size: bound it by the file (deflate
	// expands at most 1032-fold) before anything is allocated from it.
	if z.CompressedSize64 > uint64(f.size) || z.UncompressedSize64 > 1032*z.CompressedSize64+64 {
		return torchErr("tensor %q: record data/%s claims %d bytes (%d compressed) in a %d-byte file", name, t.key, z.UncompressedSize64, z.CompressedSize64, f.size)
	}
	if want := uint64(t.numel) * uint64(t.DType.Size()); z.UncompressedSize64 != want || t.numel > int64(z.UncompressedSize64) {
		return torchErr("tensor %q: record data/%s holds %d bytes, %d %s elements need %d", name, t.key, z.UncompressedSize64, t.numel, t.DType, want)
	}
	if len(t.Shape) != len(t.Stride) {
		return torchErr("tensor %q: shape %v and stride %v differ in length", name, t.Shape, t.Stride)
	}
	n, err := numElements(t.Shape, t.numel+1)
	if err != nil {
		return torchErr("tensor %q: %v", name, err)
	}
	last := t.Offset
	for i, d := range t.Shape {
		if t.Stride[i] < 0 {
			return torchErr("tensor %q: negative stride %v", name, t.Stride)
		}
		if d > 0 {
			last += int64(d-1) * int64(t.Stride[i])
		}
	}
	if n > 0 && (t.Offset < 0 || last >= t.numel) {
		return torchErr("tensor %q: view (offset %d, shape %v, stride %v) outside its %d-element storage", name, t.Offset, t.Shape, t.Stride, t.numel)
	}
	return nil
}

// ReadFloat32 fills dst (the tensor's element count) with the named
// tensor's elements in row-major order, converted to float32 (BF16 and
// F16 exactly, F64 rounded).
func (f *TorchFile) ReadFloat32(name string, dst []float32) error {
	t, ok := f.Tensors[name]
	if !ok {
		return fmt.Errorf("checkpoint: no tensor %q", name)
	}
	n, _ := numElements(t.Shape, t.numel+1)
	if int64(len(dst)) != n {
		return fmt.Errorf("checkpoint: tensor %q has %d elements, not %d", name, n, len(dst))
	}
	if n == 0 {
		return nil
	}
	rc, err := f.records["data/"+t.key].Open()
	if err != nil {
		return fmt.Errorf("checkpoint: tensor %q: %w", name, err)
	}
	defer rc.Close()
	want := t.numel * int64(t.DType.Size()) // bounded by the file in check
	raw, err := io.ReadAll(io.LimitReader(rc, want+1))
	if err != nil {
		return fmt.Errorf("checkpoint: tensor %q: %w", name, err)
	}
	if int64(len(raw)) != want {
		return torchErr("tensor %q: record data/%s holds %d bytes, not %d", name, t.key, len(raw), want)
	}
	all := make([]float32, t.numel)
	decode(t.DType, raw, all)
	idx := make([]int, len(t.Shape))
	for i := range dst {
		off := t.Offset
		for d, j := range idx {
			off += int64(j) * int64(t.Stride[d])
		}
		dst[i] = all[off]
		for d := len(idx) - 1; d >= 0; d-- {
			if idx[d]++; idx[d] < t.Shape[d] {
				break
			}
			idx[d] = 0
		}
	}
	return nil
}

// LoadTorch reads a state dict saved with torch.save(module.state_dict(),
// path) into m, as LoadModel reads a safetensors file: keys mapped by
// names, every missing, unexpected or misshapen key named, nothing loaded
// unless all match. float32, bfloat16, float16 and float64 tensors load,
// converted to float32 (bfloat16 and float16 exactly).
func LoadTorch(path string, m nn.Module, names NameMap) error {
	return openFile(path, OpenTorch, func(tf *TorchFile) error {
		return loadModule(m, names, tf.shapes(), tf.ReadFloat32)
	})
}

// SaveTorch writes m's parameters and buffers, named by names, to path as
// torch.save(state_dict) writes them, so that torch.load(path) returns a
// state dict for load_state_dict. Tensors are float32 (FloatStorage)
// unless an option says otherwise: WithDType(tensor.BFloat16) writes
// BFloat16Storage, each value rounded to nearest even. Written atomically.
func SaveTorch(path string, m nn.Module, names NameMap, opts ...WriteOption) error {
	entries := ModuleEntries(m, names)
	cfg := newWriteConfig(opts)
	dtype, ok := fileDType(cfg.dtype)
	if !ok {
		name := ""
		if len(entries) > 0 {
			name = fmt.Sprintf("tensor %q: ", entries[0].Name)
		}
		return fmt.Errorf("checkpoint: %scannot write dtype %v (float32 and bfloat16 only)", name, cfg.dtype)
	}
	prefix := strings.TrimSuffix(path2base(path), ".pt")
	_, _, err := writeAtomic(path, nil, func(w io.Writer) error {
		return writeTorch(w, prefix, entries, dtype)
	})
	return err
}

func path2base(p string) string {
	b := path.Base(strings.ReplaceAll(p, string(os.PathSeparator), "/"))
	if b == "" || b == "." || b == "/" {
		return "archive"
	}
	return b
}

// writeTorch writes entries as a torch.save zip archive under prefix.
func writeTorch(w io.Writer, prefix string, entries []Entry, dtype DType) error {
	storage := "FloatStorage"
	if dtype == BF16 {
		storage = "BFloat16Storage"
	}
	var p bytes.Buffer
	p.Write([]byte{0x80, 2}) // PROTO 2
	global := func(mod, name string) { p.WriteString("c" + mod + "\n" + name + "\n") }
	str := func(s string) {
		p.WriteByte('X')
		binary.Write(&p, binary.LittleEndian, uint32(len(s)))
		p.WriteString(s)
	}
	integer := func(v int64) {
		switch {
		case v >= 0 && v < 1<<8:
			p.Write([]byte{'K', byte(v)})
		case v >= 0 && v < 1<<16:
			p.Write([]byte{'M', byte(v), byte(v >> 8)})
		case v >= math.MinInt32 && v <= math.MaxInt32:
			p.WriteByte('J')
			binary.Write(&p, binary.LittleEndian, int32(v))
		default:
			p.Write([]byte{0x8a, 8})
			binary.Write(&p, binary.LittleEndian, v)
		}
	}
	tuple := func(vs []int) {
		p.WriteByte('(')
		for _, v := range vs {
			integer(int64(v))
		}
		p.WriteByte('t')
	}
	global("collections", "OrderedDict")
	p.WriteString(")R(") // OrderedDict(), MARK
	for i, e := range entries {
		str(e.Name)
		global("torch._utils", "_rebuild_tensor_v2")
		p.WriteString("((") // MARK args, MARK persistent id
		str("storage")
		global("torch", storage)
		str(strconv.Itoa(i))
		str("cpu")
		integer(int64(len(e.Data)))
		p.WriteString("tQ") // TUPLE, BINPERSID
		integer(0)
		tuple(e.Shape)
		stride := make([]int, len(e.Shape))
		for d, s := len(e.Shape)-1, 1; d >= 0; d-- {
			stride[d] = s
			s *= e.Shape[d]
		}
		tuple(stride)
		p.WriteByte(0x89) // NEWFALSE: requires_grad
		global("collections", "OrderedDict")
		p.WriteString(")RtR") // OrderedDict() hooks; TUPLE args; REDUCE
	}
	p.WriteString("u.") // SETITEMS, STOP

	cw := &countWriter{w: w}
	zw := zip.NewWriter(cw)
	put := func(name string, data []byte) error {
		name = prefix + "/" + name
		if err := zw.Flush(); err != nil { // cw.n: the offset of the next header
			return err
		}
		// Align the data to 64 bytes with a padding extra field, as
		// torch.save does: local header 30 bytes + name + extra.
		pad := (64 - (cw.n+30+int64(len(name))+4)%64) % 64
		extra := make([]byte, 4+pad)
		binary.LittleEndian.PutUint16(extra, 0x4b46) // "FK", torch's padding id
		binary.LittleEndian.PutUint16(extra[2:], uint16(pad))
		fw, err := zw.CreateRaw(&zip.FileHeader{
			Name: name, Method: zip.Store, Extra: extra,
			CRC32: crc32.ChecksumIEEE(data), CompressedSize64: uint64(len(data)), UncompressedSize64: uint64(len(data)),
		})
		if err != nil {
			return err
		}
		_, err = fw.Write(data)
		return err
	}
	if err := put("data.pkl", p.Bytes()); err != nil {
		return err
	}
	keys := make([]int, len(entries))
	for i := range keys {
		keys[i] = i
	}
	sort.Slice(keys, func(a, b int) bool { return strconv.Itoa(keys[a]) < strconv.Itoa(keys[b]) })
	for _, i := range keys {
		e := entries[i]
		var buf []byte
		if dtype == BF16 {
			h := make([]uint16, len(e.Data))
			tensor.ToBFloat16(h, e.Data)
			buf = make([]byte, 2*len(h))
			for j, v := range h {
				binary.LittleEndian.PutUint16(buf[2*j:], v)
			}
		} else {
			buf = make([]byte, 4*len(e.Data))
			for j, v := range e.Data {
				binary.LittleEndian.PutUint32(buf[4*j:], math.Float32bits(v))
			}
		}
		if err := put("data/"+strconv.Itoa(i), buf); err != nil {
			return err
		}
	}
	if err := put("version", []byte("3\n")); err != nil {
		return err
	}
	return zw.Close()
}
