package checkpoint

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// encodeRaw builds a file from a header string and a data buffer.
func encodeRaw(header string, data []byte) []byte {
	var b bytes.Buffer
	binary.Write(&b, binary.LittleEndian, uint64(len(header)))
	b.WriteString(header)
	b.Write(data)
	return b.Bytes()
}

func TestWriteLayout(t *testing.T) {
	var b bytes.Buffer
	n, err := Write(&b, []Entry{
		{Name: "b", Shape: []int{2}, Data: []float32{1, -2}},
		{Name: "a", Shape: []int{}, Data: []float32{0.5}},
	}, map[string]string{"format": "pt"})
	if err != nil {
		t.Fatal(err)
	}
	got := b.Bytes()
	if n != int64(len(got)) {
		t.Errorf("Write reported %d bytes, wrote %d", n, len(got))
	}
	hl := binary.LittleEndian.Uint64(got)
	header := string(got[8 : 8+hl])
	want := `{"__metadata__":{"format":"pt"},"a":{"dtype":"F32","shape":[],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}}`
	if strings.TrimRight(header, " ") != want {
		t.Errorf("header\n%s\nwant\n%s", header, want)
	}
	if (8+hl)%8 != 0 || len(header)-len(want) >= 8 {
		t.Errorf("header of %d bytes (JSON %d) is not space-padded to the next multiple of 8", hl, len(want))
	}
	var data []float32
	for i := 8 + int(hl); i < len(got); i += 4 {
		data = append(data, math.Float32frombits(binary.LittleEndian.Uint32(got[i:])))
	}
	if !slices.Equal(data, []float32{0.5, 1, -2}) {
		t.Errorf("data %v, want [0.5 1 -2] (name order)", data)
	}
}

func TestRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name    string
		entries []Entry
		meta    map[string]string
	}{
		{"empty", nil, nil},
		{"scalar", []Entry{{Name: "s", Shape: []int{}, Data: []float32{3}}}, nil},
		{"zero-size", []Entry{{Name: "z", Shape: []int{0, 5}, Data: []float32{}}, {Name: "y", Shape: []int{1}, Data: []float32{7}}}, nil},
		{"matrix+meta", []Entry{{Name: "0.weight", Shape: []int{2, 3}, Data: []float32{1, 2, 3, 4, 5, float32(math.Inf(-1))}},
			{Name: "0.bias", Shape: []int{2}, Data: []float32{-0.0, 1e-38}}}, map[string]string{"format": "pt", "ü<>&\"": "x\ny"}},
		{"long", []Entry{{Name: "big", Shape: []int{70000}, Data: make([]float32, 70000)}}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for i := range tc.entries {
				for j := range tc.entries[i].Data {
					if tc.name == "long" {
						tc.entries[i].Data[j] = float32(j) * 0.25
					}
				}
			}
			var b bytes.Buffer
			if _, err := Write(&b, tc.entries, tc.meta); err != nil {
				t.Fatal(err)
			}
			f := openBytes(t, b.Bytes())
			if len(f.Metadata) != len(tc.meta) {
				t.Errorf("metadata %v, want %v", f.Metadata, tc.meta)
			}
			for k, v := range tc.meta {
				if f.Metadata[k] != v {
					t.Errorf("metadata %q = %q, want %q", k, f.Metadata[k], v)
				}
			}
			if len(f.Tensors) != len(tc.entries) {
				t.Errorf("%d tensors, want %d", len(f.Tensors), len(tc.entries))
			}
			for _, e := range tc.entries {
				got, err := f.Tensor(e.Name)
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(got.Shape(), e.Shape) || !bitsEqual(got.Data(), e.Data) {
					t.Errorf("%s: got %v, want shape %v data %v", e.Name, got, e.Shape, e.Data)
				}
			}
		})
	}
}

func bitsEqual(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return false
		}
	}
	return true
}

func TestReadDTypes(t *testing.T) {
	le := binary.LittleEndian
	for _, tc := range []struct {
		dtype DType
		data  []byte
		want  []float32
	}{
		{F16, le.AppendUint16(le.AppendUint16(le.AppendUint16(le.AppendUint16(nil, 0x3c00), 0xc000), 0x0001), 0x7c00),
			[]float32{1, -2, float32(math.Ldexp(1, -24)), float32(math.Inf(1))}},
		{BF16, le.AppendUint16(le.AppendUint16(nil, 0x3f80), 0xbfc0), []float32{1, -1.5}},
		{F64, le.AppendUint64(nil, math.Float64bits(0.1)), []float32{0.1}},
		{I64, le.AppendUint64(le.AppendUint64(nil, 7), uint64(1<<64-3)), []float32{7, -3}},
		{I32, le.AppendUint32(nil, uint32(1<<32-1)), []float32{-1}},
		{I8, []byte{0xff, 5}, []float32{-1, 5}},
		{U8, []byte{0xff}, []float32{255}},
		{Bool, []byte{0, 1}, []float32{0, 1}},
	} {
		t.Run(string(tc.dtype), func(t *testing.T) {
			h := `{"x":{"dtype":"` + string(tc.dtype) + `","shape":[` + strconv.Itoa(len(tc.want)) + `],"data_offsets":[0,` + strconv.Itoa(len(tc.data)) + `]}}`
			file := encodeRaw(h, tc.data)
			got, err := openBytes(t, file).Tensor("x")
			if err != nil {
				t.Fatal(err)
			}
			if !bitsEqual(got.Data(), tc.want) {
				t.Errorf("%s: got %v, want %v", tc.dtype, got.Data(), tc.want)
			}
		})
	}
}

// TestReadHeaderRejects lists malformed files and the words their errors
// must contain.
func TestReadHeaderRejects(t *testing.T) {
	f32 := func(n int) []byte { return make([]byte, 4*n) }
	big := make([]byte, 8)
	binary.LittleEndian.PutUint64(big, MaxHeaderBytes+1)
	huge := make([]byte, 8)
	binary.LittleEndian.PutUint64(huge, 1<<63)
	for _, tc := range []struct {
		name string
		file []byte
		want string
	}{
		{"short", []byte{1, 2, 3}, "shorter than the 8-byte"},
		{"header over limit", append(big, '{', '}'), "exceeds the 100000000-byte limit"},
		{"header length overflow", append(huge, '{', '}'), "exceeds the 100000000-byte limit"},
		{"header past end", append(binary.LittleEndian.AppendUint64(nil, 50), '{', '}'), "exceeds the 2 bytes"},
		{"not an object", encodeRaw(`["a"]`, nil), "does not start with '{'"},
		{"bad json", encodeRaw(`{"a":`, nil), "header"},
		{"trailing garbage", encodeRaw(`{} x`, nil), "not white space"},
		{"duplicate key", encodeRaw(`{"a":{"dtype":"F32","shape":[],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[],"data_offsets":[0,4]}}`, f32(1)), "appears twice"},
		{"unknown field", encodeRaw(`{"a":{"dtype":"F32","shape":[],"data_offsets":[0,4],"x":1}}`, f32(1)), "unknown field"},
		{"missing shape", encodeRaw(`{"a":{"dtype":"F32","data_offsets":[0,4]}}`, f32(1)), "want dtype, shape"},
		{"three offsets", encodeRaw(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4,8]}}`, f32(1)), "two data_offsets"},
		{"unknown dtype", encodeRaw(`{"a":{"dtype":"F8_E4M3","shape":[1],"data_offsets":[0,1]}}`, []byte{0}), "unsupported dtype"},
		{"negative dim", encodeRaw(`{"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}}`, f32(1)), "negative dimension"},
		{"shape overflow", encodeRaw(`{"a":{"dtype":"F32","shape":[4294967296,4294967296,4],"data_offsets":[0,4]}}`, f32(1)), "more elements than the buffer"},
		{"size mismatch", encodeRaw(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}}`, f32(2)), "needs 8"},
		{"offsets reversed", encodeRaw(`{"a":{"dtype":"F32","shape":[0],"data_offsets":[4,0]}}`, f32(1)), "outside the 4-byte buffer"},
		{"past buffer", encodeRaw(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`, f32(1)), "outside the 4-byte buffer"},
		{"hole", encodeRaw(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`, f32(2)), "hole"},
		{"overlap", encodeRaw(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`, f32(2)), "overlap"},
		{"buffer too long", encodeRaw(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}`, f32(2)), "end at byte 4 of a 8-byte buffer"},
		{"metadata not strings", encodeRaw(`{"__metadata__":{"a":1}}`, nil), "__metadata__ must map strings"},
		{"not utf8", encodeRaw("{\"\xff\":1}", nil), "not UTF-8"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ReadHeader(bytes.NewReader(tc.file), int64(len(tc.file)))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("ReadHeader: %v, want an error containing %q", err, tc.want)
			}
			if !errors.Is(err, ErrFormat) {
				t.Errorf("error %v does not wrap ErrFormat", err)
			}
		})
	}
}

func TestWriteRejects(t *testing.T) {
	for _, tc := range []struct {
		name    string
		entries []Entry
		want    string
	}{
		{"duplicate", []Entry{{Name: "a", Shape: []int{}, Data: []float32{1}}, {Name: "a", Shape: []int{}, Data: []float32{1}}}, "used twice"},
		{"reserved", []Entry{{Name: "__metadata__", Shape: []int{}, Data: []float32{1}}}, "reserved"},
		{"short data", []Entry{{Name: "a", Shape: []int{3}, Data: []float32{1}}}, "1 values for shape [3]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Write(&bytes.Buffer{}, tc.entries, nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Write: %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

// openBytes opens the safetensors file raw, failing t on an error.
func openBytes(t *testing.T, raw []byte) *File {
	t.Helper()
	f, err := NewFile(bytes.NewReader(raw), int64(len(raw)))
	if err != nil {
		t.Fatal(err)
	}
	return f
}
