package wrapcore

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
)

// tensorSpec describes one parameter or buffer for the wrap-time check
// that every rank holds the same model.
type tensorSpec struct {
	Kind  string // "parameter" or "buffer"
	Name  string
	Shape []int
	DType string
	Grad  bool // requires grad (parameters only)
}

func (s tensorSpec) String() string {
	g := ""
	if s.Kind == "parameter" && !s.Grad {
		g = " (frozen)"
	}
	return fmt.Sprintf("%s %q %s%v%s", s.Kind, s.Name, s.DType, s.Shape, g)
}

// encodeSpecs renders specs one per line, a format both sides of the
// comparison can parse back.
func encodeSpecs(specs []tensorSpec) []byte {
	var b strings.Builder
	for _, s := range specs {
		b.WriteString(s.Kind)
		b.WriteByte('\t')
		b.WriteString(strconv.Quote(s.Name))
		b.WriteByte('\t')
		b.WriteString(s.DType)
		b.WriteByte('\t')
		for i, d := range s.Shape {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(strconv.Itoa(d))
		}
		b.WriteByte('\t')
		b.WriteString(strconv.FormatBool(s.Grad))
		b.WriteByte('\n')
	}
	return []byte(b.String())
}

// decodeSpecs parses encodeSpecs' output.
func decodeSpecs(p []byte) ([]tensorSpec, error) {
	var out []tensorSpec
	for n, line := range strings.Split(strings.TrimSuffix(string(p), "\n"), "\n") {
		if line == "" && n == 0 {
			break
		}
		f := strings.Split(line, "\t")
		if len(f) != 5 {
			return nil, fmt.Errorf("ddp: model description line %d: %d fields, want 5", n+1, len(f))
		}
		name, err := strconv.Unquote(f[1])
		if err != nil {
			return nil, fmt.Errorf("ddp: model description line %d: name: %w", n+1, err)
		}
		var shape []int
		if f[3] != "" {
			for _, d := range strings.Split(f[3], ",") {
				v, err := strconv.Atoi(d)
				if err != nil {
					return nil, fmt.Errorf("ddp: model description line %d: shape: %w", n+1, err)
				}
				shape = append(shape, v)
			}
		}
		grad, err := strconv.ParseBool(f[4])
		if err != nil {
			return nil, fmt.Errorf("ddp: model description line %d: %w", n+1, err)
		}
		out = append(out, tensorSpec{Kind: f[0], Name: name, DType: f[2], Shape: shape, Grad: grad})
	}
	return out, nil
}

// specHash fingerprints an encoded description.
func specHash(p []byte) int64 {
	h := fnv.New64a()
	h.Write(p)
	return int64(h.Sum64())
}

// firstSpecMismatch returns the index of the first entry where local and
// root differ (an entry missing on one side counts), or -1.
func firstSpecMismatch(local, root []tensorSpec) int {
	for i := 0; i < max(len(local), len(root)); i++ {
		if i >= len(local) || i >= len(root) || !sameSpec(local[i], root[i]) {
			return i
		}
	}
	return -1
}

func sameSpec(a, b tensorSpec) bool {
	if a.Kind != b.Kind || a.Name != b.Name || a.DType != b.DType || a.Grad != b.Grad || len(a.Shape) != len(b.Shape) {
		return false
	}
	for i := range a.Shape {
		if a.Shape[i] != b.Shape[i] {
			return false
		}
	}
	return true
}

// describeAt describes entry i of specs, or its absence.
func describeAt(specs []tensorSpec, i int) string {
	if i < len(specs) {
		return specs[i].String()
	}
	return fmt.Sprintf("nothing (%d entries)", len(specs))
}

// packBytes stores p in int64 words (little-endian, zero-padded) so that
// it can travel in an Int64 buffer.
func packBytes(p []byte) []int64 {
	w := make([]int64, (len(p)+7)/8)
	var tmp [8]byte
	for i := range w {
		clear(tmp[:])
		copy(tmp[:], p[i*8:])
		w[i] = int64(binary.LittleEndian.Uint64(tmp[:]))
	}
	return w
}

// unpackBytes reverses packBytes for a payload of n bytes.
func unpackBytes(w []int64, n int) []byte {
	p := make([]byte, len(w)*8)
	for i, v := range w {
		binary.LittleEndian.PutUint64(p[i*8:], uint64(v))
	}
	return p[:n]
}
