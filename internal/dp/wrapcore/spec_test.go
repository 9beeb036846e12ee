package wrapcore

import (
	"bytes"
	"slices"
	"testing"
)

func TestSpecRoundTrip(t *testing.T) {
	specs := []tensorSpec{
		{Kind: "parameter", Name: "0.weight", Shape: []int{5, 4}, DType: "float32", Grad: true},
		{Kind: "parameter", Name: "tab\tand \"quote\"", Shape: []int{3}, DType: "float32"},
		{Kind: "buffer", Name: "scalar", DType: "float32"},
	}
	enc := encodeSpecs(specs)
	got, err := decodeSpecs(enc)
	if err != nil {
		t.Fatal(err)
	}
	if firstSpecMismatch(got, specs) != -1 || len(got) != len(specs) {
		t.Fatalf("round trip: %v, want %v", got, specs)
	}
	if empty, err := decodeSpecs(encodeSpecs(nil)); err != nil || len(empty) != 0 {
		t.Fatalf("empty description: %v, %v", empty, err)
	}
	for _, n := range []int{0, 1, 7, 8, 9, 100} {
		p := bytes.Repeat([]byte{0xa5}, n)
		if got := unpackBytes(packBytes(p), n); !slices.Equal(got, p) {
			t.Fatalf("pack/unpack %d bytes: %x", n, got)
		}
	}
}

func TestFirstSpecMismatch(t *testing.T) {
	a := tensorSpec{Kind: "parameter", Name: "w", Shape: []int{2, 3}, DType: "float32", Grad: true}
	b := a
	b.Shape = []int{3, 2}
	tests := []struct {
		name        string
		local, root []tensorSpec
		want        int
	}{
		{"equal", []tensorSpec{a, a}, []tensorSpec{a, a}, -1},
		{"shape", []tensorSpec{a, b}, []tensorSpec{a, a}, 1},
		{"extra", []tensorSpec{a, a}, []tensorSpec{a}, 1},
		{"missing", []tensorSpec{a}, []tensorSpec{a, a}, 1},
		{"both empty", nil, nil, -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := firstSpecMismatch(tt.local, tt.root); got != tt.want {
				t.Fatalf("firstSpecMismatch = %d, want %d", got, tt.want)
			}
		})
	}
}

// FuzzDecodeSpecs: rank 0's description arrives over the network; any
// bytes must decode or fail cleanly, and what decodes re-encodes to a
// description that decodes to the same thing.
func FuzzDecodeSpecs(f *testing.F) {
	f.Add(encodeSpecs([]tensorSpec{{Kind: "parameter", Name: "w", Shape: []int{2, 3}, DType: "float32", Grad: true}}))
	f.Add([]byte("parameter\t\"x\"\tfloat32\t\ttrue\n"))
	f.Add([]byte("\n\n"))
	f.Fuzz(func(t *testing.T, p []byte) {
		specs, err := decodeSpecs(p)
		if err != nil {
			return
		}
		again, err := decodeSpecs(encodeSpecs(specs))
		if err != nil {
			t.Fatalf("re-encoded description does not decode: %v", err)
		}
		if len(again) != len(specs) || firstSpecMismatch(again, specs) != -1 {
			t.Fatalf("round trip changed %v into %v", specs, again)
		}
	})
}
