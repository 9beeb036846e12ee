package checkpoint

// The safetensors format (https://github.com/huggingface/safetensors):
//
//	8 bytes   N, the header length, a little-endian uint64
//	N bytes   a JSON object: for each tensor name
//	          {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]},
//	          plus an optional "__metadata__": {string: string}; padded
//	          with spaces so that 8+N is a multiple of 8
//	the rest  the byte buffer; offsets are relative to its start, tensors
//	          are row-major little-endian, packed without holes and cover
//	          the whole buffer
//
// The writer produces what the reference Rust implementation writes:
// compact JSON, "__metadata__" first, tensors in name order (all of one
// dtype, F32 or BF16 (WithDType), so the reference's alignment-then-name
// order is name order), data in the same order. The reader accepts any valid file and rejects what
// the reference rejects (header over 100 MB, offsets with holes, overlaps
// or a size that disagrees with dtype and shape, a buffer longer or
// shorter than the tensors), bounding every length by the file size before
// allocating.

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"sort"
	"strconv"
	"unicode/utf8"

	"github.com/cohortml/cohort/tensor"
)

// MaxHeaderBytes is the largest JSON header accepted, the reference
// implementation's limit.
const MaxHeaderBytes = 100_000_000

// ErrFormat is wrapped by every error about a malformed safetensors file.
var ErrFormat = errors.New("checkpoint: malformed safetensors")

// DType is a safetensors element type.
type DType string

// The element types the reader converts to float32. The writer writes F32,
// or BF16 with WithDType(tensor.BFloat16): bfloat16 bits as little-endian
// uint16, as PyTorch's safetensors.torch.save_file writes a bf16 tensor.
const (
	F64  DType = "F64"
	F32  DType = "F32"
	F16  DType = "F16"
	BF16 DType = "BF16"
	I64  DType = "I64"
	I32  DType = "I32"
	I16  DType = "I16"
	I8   DType = "I8"
	U8   DType = "U8"
	Bool DType = "BOOL"
)

// Size returns the bytes per element, 0 for a type this package does not
// know.
func (d DType) Size() int {
	switch d {
	case F64, I64:
		return 8
	case F32, I32:
		return 4
	case F16, BF16, I16:
		return 2
	case I8, U8, Bool:
		return 1
	}
	return 0
}

// TensorInfo is one tensor's header entry. Offsets are byte offsets into
// the data buffer, [begin, end).
type TensorInfo struct {
	DType   DType    `json:"dtype"`
	Shape   []int    `json:"shape"`
	Offsets [2]int64 `json:"data_offsets"`
}

// NumElements returns the product of the shape (1 for a scalar).
func (ti TensorInfo) NumElements() int64 {
	n := int64(1)
	for _, d := range ti.Shape {
		n *= int64(d)
	}
	return n
}

// Header is a decoded, validated safetensors header.
type Header struct {
	Tensors  map[string]TensorInfo
	Metadata map[string]string // nil when the file has none
	// DataStart is the file offset of the data buffer (8 + header length);
	// DataBytes its length.
	DataStart, DataBytes int64
}

// Names returns the tensor names in sorted order.
func (h *Header) Names() []string {
	names := make([]string, 0, len(h.Tensors))
	for n := range h.Tensors {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

func formatErr(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrFormat, fmt.Sprintf(format, args...))
}

// ReadHeader decodes and validates the header of a safetensors file of
// size bytes read through r. Every tensor's offsets are checked against
// its dtype and shape and against the buffer, so reading a tensor the
// header names cannot fail for format reasons.
func ReadHeader(r io.ReaderAt, size int64) (*Header, error) {
	if size < 8 {
		return nil, formatErr("%d bytes, shorter than the 8-byte header length", size)
	}
	var lenBuf [8]byte
	if _, err := r.ReadAt(lenBuf[:], 0); err != nil {
		return nil, fmt.Errorf("checkpoint: reading header length: %w", err)
	}
	n := binary.LittleEndian.Uint64(lenBuf[:])
	if n > MaxHeaderBytes {
		return nil, formatErr("header length %d exceeds the %d-byte limit", n, MaxHeaderBytes)
	}
	if int64(n) > size-8 {
		return nil, formatErr("header length %d exceeds the %d bytes after the length", n, size-8)
	}
	if n < 2 {
		return nil, formatErr("header length %d, too short for a JSON object", n)
	}
	js := make([]byte, n) // bounded by size and MaxHeaderBytes above
	if _, err := r.ReadAt(js, 8); err != nil {
		return nil, fmt.Errorf("checkpoint: reading %d-byte header: %w", n, err)
	}
	return decodeHeader(js, 8+int64(n), size-8-int64(n))
}

// decodeHeader parses the JSON header js for a data buffer of dataBytes
// bytes starting at dataStart.
func decodeHeader(js []byte, dataStart, dataBytes int64) (*Header, error) {
	if js[0] != '{' {
		return nil, formatErr("header does not start with '{'")
	}
	if !utf8.Valid(js) {
		return nil, formatErr("header is not UTF-8")
	}
	h := &Header{Tensors: map[string]TensorInfo{}, DataStart: dataStart, DataBytes: dataBytes}
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.UseNumber()
	if _, err := dec.Token(); err != nil { // '{'
		return nil, formatErr("header: %v", err)
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, formatErr("header: %v", err)
		}
		key, ok := tok.(string)
		if !ok {
			return nil, formatErr("header: key %v is not a string", tok)
		}
		if seen[key] {
			return nil, formatErr("header: key %q appears twice", key)
		}
		seen[key] = true
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, formatErr("header: key %q: %v", key, err)
		}
		if key == "__metadata__" {
			if err := strictUnmarshal(raw, &h.Metadata); err != nil {
				return nil, formatErr("header: __metadata__ must map strings to strings: %v", err)
			}
			continue
		}
		var ti struct { // pointers: every field is required
			DType   *DType   `json:"dtype"`
			Shape   *[]int   `json:"shape"`
			Offsets *[]int64 `json:"data_offsets"`
		}
		if err := strictUnmarshal(raw, &ti); err != nil {
			return nil, formatErr("header: tensor %q: %v", key, err)
		}
		if ti.DType == nil || ti.Shape == nil || ti.Offsets == nil || len(*ti.Offsets) != 2 {
			return nil, formatErr("header: tensor %q: want dtype, shape and two data_offsets", key)
		}
		h.Tensors[key] = TensorInfo{DType: *ti.DType, Shape: *ti.Shape, Offsets: [2]int64{(*ti.Offsets)[0], (*ti.Offsets)[1]}}
	}
	if _, err := dec.Token(); err != nil { // '}'
		return nil, formatErr("header: %v", err)
	}
	rest := js[dec.InputOffset():]
	if len(bytes.TrimLeft(rest, " \t\r\n")) != 0 {
		return nil, formatErr("header: %d bytes after the JSON object are not white space", len(rest))
	}
	if err := h.validate(); err != nil {
		return nil, err
	}
	return h, nil
}

func strictUnmarshal(raw []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

// validate checks every tensor's dtype, shape and offsets and that the
// tensors tile the data buffer exactly.
func (h *Header) validate() error {
	type span struct {
		name       string
		begin, end int64
	}
	spans := make([]span, 0, len(h.Tensors))
	for _, name := range h.Names() {
		ti := h.Tensors[name]
		es := int64(ti.DType.Size())
		if es == 0 {
			return formatErr("tensor %q: unsupported dtype %q", name, ti.DType)
		}
		n, err := numElements(ti.Shape, h.DataBytes/es)
		if err != nil {
			return formatErr("tensor %q: %v", name, err)
		}
		b, e := ti.Offsets[0], ti.Offsets[1]
		if b < 0 || e < b || e > h.DataBytes {
			return formatErr("tensor %q: data_offsets [%d, %d] outside the %d-byte buffer", name, b, e, h.DataBytes)
		}
		if e-b != n*es {
			return formatErr("tensor %q: data_offsets [%d, %d] hold %d bytes, dtype %s shape %v needs %d", name, b, e, e-b, ti.DType, ti.Shape, n*es)
		}
		spans = append(spans, span{name, b, e})
	}
	slices.SortStableFunc(spans, func(a, b span) int {
		if a.begin != b.begin {
			return cmpInt64(a.begin, b.begin)
		}
		return cmpInt64(a.end, b.end)
	})
	var at int64
	for _, s := range spans {
		if s.begin != at {
			if s.begin < at {
				return formatErr("tensor %q: data_offsets [%d, %d] overlap the previous tensor (ends at %d)", s.name, s.begin, s.end, at)
			}
			return formatErr("tensor %q: data_offsets [%d, %d] leave a hole after byte %d", s.name, s.begin, s.end, at)
		}
		at = s.end
	}
	if at != h.DataBytes {
		return formatErr("tensors end at byte %d of a %d-byte buffer", at, h.DataBytes)
	}
	return nil
}

func cmpInt64(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// numElements returns the product of shape, failing for a negative
// dimension or a product above limit (checked without overflow).
func numElements(shape []int, limit int64) (int64, error) {
	for _, d := range shape {
		if d < 0 {
			return 0, fmt.Errorf("negative dimension in shape %v", shape)
		}
		if d == 0 {
			return 0, nil
		}
	}
	n := int64(1)
	for _, d := range shape {
		if int64(d) > limit/n {
			return 0, fmt.Errorf("shape %v has more elements than the buffer holds", shape)
		}
		n *= int64(d)
	}
	return n, nil
}

// Entry is a float32 tensor to write: row-major data of the given shape.
type Entry struct {
	Name  string
	Shape []int
	Data  []float32
}

// WriteOption changes how Write (and SaveModel, SaveGPT2) writes tensors.
type WriteOption func(*writeConfig)

type writeConfig struct {
	dtype tensor.DType
}

// WithDType writes every tensor as dt: tensor.Float32 (F32, the default)
// or tensor.BFloat16 (BF16, each value rounded to nearest, ties to even,
// as PyTorch's .to(torch.bfloat16) rounds). Any other dtype makes the
// write fail with an error naming it and the first tensor.
func WithDType(dt tensor.DType) WriteOption {
	return func(c *writeConfig) { c.dtype = dt }
}

func newWriteConfig(opts []WriteOption) writeConfig {
	c := writeConfig{dtype: tensor.Float32}
	for _, o := range opts {
		o(&c)
	}
	return c
}

// fileDType returns the safetensors dtype dt is written as.
func fileDType(dt tensor.DType) (DType, bool) {
	switch dt {
	case tensor.Float32:
		return F32, true
	case tensor.BFloat16:
		return BF16, true
	}
	return "", false
}

// encodeHeader returns the padded JSON header for entries (written in
// name order, each as dtype) and the byte size of the data buffer.
func encodeHeader(entries []Entry, metadata map[string]string, dtype DType) ([]byte, int64, error) {
	es := int64(dtype.Size())
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	str := func(s string) {
		_ = enc.Encode(s)       // strings always encode
		b.Truncate(b.Len() - 1) // Encode's newline
	}
	b.WriteByte('{')
	first := true
	if len(metadata) > 0 {
		b.WriteString(`"__metadata__":{`)
		keys := make([]string, 0, len(metadata))
		for k := range metadata {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for i, k := range keys {
			if i > 0 {
				b.WriteByte(',')
			}
			str(k)
			b.WriteByte(':')
			str(metadata[k])
		}
		b.WriteByte('}')
		first = false
	}
	var off int64
	seen := map[string]bool{}
	for _, e := range entries {
		if e.Name == "__metadata__" || seen[e.Name] || !utf8.ValidString(e.Name) {
			return nil, 0, fmt.Errorf("checkpoint: tensor name %q used twice, reserved or not UTF-8", e.Name)
		}
		seen[e.Name] = true
		n := int64(1)
		for _, d := range e.Shape {
			if d < 0 {
				return nil, 0, fmt.Errorf("checkpoint: tensor %q: negative dimension in shape %v", e.Name, e.Shape)
			}
			n *= int64(d)
		}
		if n != int64(len(e.Data)) {
			return nil, 0, fmt.Errorf("checkpoint: tensor %q: %d values for shape %v", e.Name, len(e.Data), e.Shape)
		}
		if !first {
			b.WriteByte(',')
		}
		first = false
		str(e.Name)
		b.WriteString(`:{"dtype":"` + string(dtype) + `","shape":[`)
		for i, d := range e.Shape {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(strconv.Itoa(d))
		}
		fmt.Fprintf(&b, `],"data_offsets":[%d,%d]}`, off, off+es*n)
		off += es * n
	}
	b.WriteByte('}')
	for b.Len()%8 != 0 {
		b.WriteByte(' ')
	}
	return b.Bytes(), off, nil
}

// sortedEntries returns entries sorted by name (a copy).
func sortedEntries(entries []Entry) []Entry {
	s := slices.Clone(entries)
	slices.SortFunc(s, func(a, b Entry) int {
		switch {
		case a.Name < b.Name:
			return -1
		case a.Name > b.Name:
			return 1
		}
		return 0
	})
	return s
}

// Write writes entries (in name order) and metadata as a safetensors file
// to w and returns the bytes written. Tensors are F32 unless an option
// says otherwise (WithDType).
func Write(w io.Writer, entries []Entry, metadata map[string]string, opts ...WriteOption) (int64, error) {
	entries = sortedEntries(entries)
	cfg := newWriteConfig(opts)
	dtype, ok := fileDType(cfg.dtype)
	if !ok {
		if len(entries) == 0 {
			return 0, fmt.Errorf("checkpoint: cannot write dtype %v (float32 and bfloat16 only)", cfg.dtype)
		}
		return 0, fmt.Errorf("checkpoint: tensor %q: cannot write dtype %v (float32 and bfloat16 only)", entries[0].Name, cfg.dtype)
	}
	js, dataBytes, err := encodeHeader(entries, metadata, dtype)
	if err != nil {
		return 0, err
	}
	var lenBuf [8]byte
	binary.LittleEndian.PutUint64(lenBuf[:], uint64(len(js)))
	if _, err := w.Write(lenBuf[:]); err != nil {
		return 0, err
	}
	if _, err := w.Write(js); err != nil {
		return 8, err
	}
	total := 8 + int64(len(js))
	buf := make([]byte, 64<<10)
	var half []uint16
	if dtype == BF16 {
		half = make([]uint16, len(buf)/2)
	}
	es := dtype.Size()
	for _, e := range entries {
		for d := e.Data; len(d) > 0; {
			k := min(len(d), len(buf)/es)
			if dtype == BF16 {
				tensor.ToBFloat16(half, d[:k])
				for i, h := range half[:k] {
					binary.LittleEndian.PutUint16(buf[2*i:], h)
				}
			} else {
				for i, v := range d[:k] {
					binary.LittleEndian.PutUint32(buf[4*i:], math.Float32bits(v))
				}
			}
			if _, err := w.Write(buf[:es*k]); err != nil {
				return total, err
			}
			total += int64(es * k)
			d = d[k:]
		}
	}
	if total != 8+int64(len(js))+dataBytes {
		panic("checkpoint: Write: size bookkeeping") // unreachable
	}
	return total, nil
}

// File reads tensors from a safetensors file through an io.ReaderAt. A
// File is safe for concurrent use when its ReaderAt is (an *os.File is).
type File struct {
	Header
	r io.ReaderAt
}

// NewFile validates the header of the size-byte file r.
func NewFile(r io.ReaderAt, size int64) (*File, error) {
	h, err := ReadHeader(r, size)
	if err != nil {
		return nil, err
	}
	return &File{Header: *h, r: r}, nil
}

// shapes returns every tensor's shape by name.
func (f *File) shapes() map[string][]int {
	out := make(map[string][]int, len(f.Tensors))
	for k, ti := range f.Tensors {
		out[k] = ti.Shape
	}
	return out
}

// Tensor returns the named tensor converted to float32 (integers and
// booleans by value, F16/BF16/F64 by rounding).
func (f *File) Tensor(name string) (*tensor.Tensor, error) {
	ti, ok := f.Tensors[name]
	if !ok {
		return nil, fmt.Errorf("checkpoint: no tensor %q", name)
	}
	out := tensor.New(ti.Shape...)
	if err := f.ReadFloat32(name, 0, out.Data()); err != nil {
		return nil, err
	}
	return out, nil
}

// ReadFloat32 fills dst with the elements [off, off+len(dst)) of the named
// tensor (flattened row-major), converted to float32.
func (f *File) ReadFloat32(name string, off int64, dst []float32) error {
	ti, ok := f.Tensors[name]
	if !ok {
		return fmt.Errorf("checkpoint: no tensor %q", name)
	}
	n := ti.NumElements()
	if off < 0 || off > n || int64(len(dst)) > n-off {
		return fmt.Errorf("checkpoint: tensor %q: elements [%d, %d) outside its %d", name, off, off+int64(len(dst)), n)
	}
	es := int64(ti.DType.Size())
	pos := f.DataStart + ti.Offsets[0] + off*es
	buf := make([]byte, min(int64(len(dst))*es, 1<<20))
	for len(dst) > 0 {
		k := min(len(dst), len(buf)/int(es))
		b := buf[:k*int(es)]
		if _, err := f.r.ReadAt(b, pos); err != nil {
			return fmt.Errorf("checkpoint: tensor %q: %w", name, err)
		}
		decode(ti.DType, b, dst[:k])
		pos += int64(len(b))
		dst = dst[k:]
	}
	return nil
}

// decode converts little-endian elements of dtype d in b to dst.
func decode(d DType, b []byte, dst []float32) {
	le := binary.LittleEndian
	if d == BF16 {
		half := make([]uint16, len(dst))
		for i := range half {
			half[i] = le.Uint16(b[2*i:])
		}
		tensor.FromBFloat16(dst, half)
		return
	}
	for i := range dst {
		switch d {
		case F32:
			dst[i] = math.Float32frombits(le.Uint32(b[4*i:]))
		case F64:
			dst[i] = float32(math.Float64frombits(le.Uint64(b[8*i:])))
		case F16:
			dst[i] = halfToFloat32(le.Uint16(b[2*i:]))
		case BF16:
			dst[i] = math.Float32frombits(uint32(le.Uint16(b[2*i:])) << 16)
		case I64:
			dst[i] = float32(int64(le.Uint64(b[8*i:])))
		case I32:
			dst[i] = float32(int32(le.Uint32(b[4*i:])))
		case I16:
			dst[i] = float32(int16(le.Uint16(b[2*i:])))
		case I8:
			dst[i] = float32(int8(b[i]))
		case U8:
			dst[i] = float32(b[i])
		case Bool:
			if b[i] != 0 {
				dst[i] = 1
			} else {
				dst[i] = 0
			}
		}
	}
}

// halfToFloat32 converts IEEE binary16 bits to float32 exactly.
func halfToFloat32(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h) & 0x3ff
	switch {
	case exp == 0x1f: // inf or NaN
		return math.Float32frombits(sign | 0xff<<23 | mant<<13)
	case exp != 0: // normal
		return math.Float32frombits(sign | (exp+112)<<23 | mant<<13)
	case mant == 0:
		return math.Float32frombits(sign)
	}
	// Subnormal: mant · 2^-24.
	v := float32(mant) * (1.0 / (1 << 24))
	if sign != 0 {
		v = -v
	}
	return v
}
