package checkpoint

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// FuzzReadHeader feeds arbitrary bytes to the safetensors reader: it must
// never panic or allocate beyond the input, and every tensor of a header
// it accepts must then be readable.
func FuzzReadHeader(f *testing.F) {
	var b bytes.Buffer
	Write(&b, []Entry{{Name: "0.weight", Shape: []int{2, 2}, Data: []float32{1, 2, 3, 4}}, {Name: "s", Shape: []int{}, Data: []float32{5}}},
		map[string]string{"format": "pt"})
	f.Add(b.Bytes())
	f.Add(encodeRaw(`{"a":{"dtype":"F16","shape":[1],"data_offsets":[0,2]}}`, []byte{0, 0x3c}))
	f.Add(encodeRaw(`{"a":{"dtype":"BF16","shape":[0],"data_offsets":[0,0]},"b":{"dtype":"I64","shape":[1],"data_offsets":[0,8]}}`, make([]byte, 8)))
	f.Add(encodeRaw(`{}`, nil))
	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := NewFile(bytes.NewReader(data), int64(len(data)))
		if err != nil {
			return
		}
		if file.DataStart+file.DataBytes != int64(len(data)) {
			t.Fatalf("header accepted with data [%d, +%d) in a %d-byte file", file.DataStart, file.DataBytes, len(data))
		}
		for _, name := range file.Names() {
			if _, err := file.Tensor(name); err != nil {
				t.Fatalf("accepted header, but tensor %q: %v", name, err)
			}
		}
	})
}

// FuzzManifest feeds arbitrary bytes to the manifest decoder: a manifest
// it accepts must let every tensor be planned whole without gaps.
func FuzzManifest(f *testing.F) {
	m, err := buildManifest(3, 2, []rankIndex{
		{Rank: 0, WorldSize: 2, Step: 3, File: FileInfo{Rank: 0, Name: "rank-00000.safetensors", Bytes: 64, SHA256: strings.Repeat("a", 64)},
			Tensors: []TensorPlan{{Name: "w", Shape: []int{2, 3}, Slices: []Slice{{Rank: 0, Offset: 0, Len: 4}}}}},
		{Rank: 1, WorldSize: 2, Step: 3, File: FileInfo{Rank: 1, Name: "rank-00001.safetensors", Bytes: 64, SHA256: strings.Repeat("b", 64)},
			Tensors: []TensorPlan{{Name: "w", Shape: []int{2, 3}, Slices: []Slice{{Rank: 1, Offset: 3, Len: 3}}}}},
	})
	if err != nil {
		f.Fatal(err)
	}
	js, _ := json.Marshal(m)
	f.Add(js)
	f.Fuzz(func(t *testing.T, data []byte) {
		var m Manifest
		if json.Unmarshal(data, &m) != nil || m.validate() != nil {
			return
		}
		for _, tp := range m.Tensors {
			n, _ := numElements(tp.Shape, 1<<62)
			if n > 1<<20 {
				continue
			}
			var covered int64
			for _, p := range planRead(tp, 0, n) {
				if p.DstOffset != covered || p.Len <= 0 || p.Rank < 0 || p.Rank >= m.WorldSize {
					t.Fatalf("tensor %q: bad piece %+v after %d elements", tp.Name, p, covered)
				}
				covered += p.Len
			}
			if covered != n {
				t.Fatalf("tensor %q: %d of %d elements planned", tp.Name, covered, n)
			}
		}
	})
}
