package checkpoint

import (
	"archive/zip"
	"bytes"
	"errors"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cohortml/cohort/nn"
	"github.com/cohortml/cohort/tensor"
)

// TestTorchRoundTrip: SaveTorch then LoadTorch gives back every value
// (float32) or its bfloat16 rounding (BFloat16), and the archive's data
// records start at 64-byte offsets, as torch.save aligns them.
func TestTorchRoundTrip(t *testing.T) {
	for _, dt := range []tensor.DType{tensor.Float32, tensor.BFloat16} {
		t.Run(dt.String(), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, 3))
			net := nn.NewSequential(nn.NewLinear(rng, 30, 20, true), nn.ReLU{}, nn.NewLinear(rng, 20, 3, true))
			copy(nn.StateDict(net)["0.weight"].Data(), bf16Values)
			path := filepath.Join(t.TempDir(), "m.pt")
			if err := SaveTorch(path, net, nil, WithDType(dt)); err != nil {
				t.Fatal(err)
			}
			back := nn.NewSequential(nn.NewLinear(rng, 30, 20, true), nn.ReLU{}, nn.NewLinear(rng, 20, 3, true))
			if err := LoadTorch(path, back, nil); err != nil {
				t.Fatal(err)
			}
			got := nn.StateDict(back)
			for k, w := range nn.StateDict(net) {
				for i, v := range w.Data() {
					want := v
					if dt == tensor.BFloat16 {
						want = math.Float32frombits(uint32(bf16Ref(v)) << 16)
					}
					if g := got[k].Data()[i]; math.Float32bits(g) != math.Float32bits(want) && !(g != g && want != want) {
						t.Fatalf("%s[%d] = %g, want %g", k, i, g, want)
					}
				}
			}
			raw, _ := os.ReadFile(path)
			zr, err := zip.NewReader(bytes.NewReader(raw), int64(len(raw)))
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range zr.File {
				if off, _ := f.DataOffset(); off%64 != 0 {
					t.Errorf("%s at offset %d, not 64-byte aligned", f.Name, off)
				}
			}
		})
	}
}

// TestTorchStrided: a view with an offset and strides (a transpose of a
// slice of its storage) reads in row-major order.
func TestTorchStrided(t *testing.T) {
	var b bytes.Buffer
	if err := writeTorch(&b, "x", []Entry{{Name: "w", Shape: []int{12}, Data: []float32{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}}}, F32); err != nil {
		t.Fatal(err)
	}
	f, err := OpenTorch(bytes.NewReader(b.Bytes()), int64(b.Len()))
	if err != nil {
		t.Fatal(err)
	}
	tt := f.Tensors["w"]
	tt.Offset, tt.Shape, tt.Stride = 1, []int{3, 2}, []int{1, 4} // [[1,5],[2,6],[3,7]]
	f.Tensors["w"] = tt
	if err := f.check("w", tt); err != nil {
		t.Fatal(err)
	}
	dst := make([]float32, 6)
	if err := f.ReadFloat32("w", dst); err != nil {
		t.Fatal(err)
	}
	if want := []float32{1, 5, 2, 6, 3, 7}; !bitsEqual(dst, want) {
		t.Errorf("got %v, want %v", dst, want)
	}
	tt.Offset = 5 // 5 + 2·1 + 1·4 = 11: the last element, fine; 6 is past it
	if err := f.check("w", tt); err != nil {
		t.Errorf("offset 5: %v", err)
	}
	tt.Offset = 6
	if err := f.check("w", tt); !errors.Is(err, ErrTorchFormat) {
		t.Errorf("offset 6: error %v, want ErrTorchFormat", err)
	}
}

// rezip rewrites a torch.save archive with data.pkl replaced by edit's.
func rezip(t *testing.T, raw []byte, edit func([]byte) []byte) []byte {
	t.Helper()
	zr, err := zip.NewReader(bytes.NewReader(raw), int64(len(raw)))
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	zw := zip.NewWriter(&out)
	for _, f := range zr.File {
		rc, _ := f.Open()
		b, _ := io.ReadAll(rc)
		rc.Close()
		if strings.HasSuffix(f.Name, "/data.pkl") {
			b = edit(b)
		}
		w, _ := zw.Create(f.Name)
		w.Write(b)
	}
	zw.Close()
	return out.Bytes()
}

func TestTorchBadInput(t *testing.T) {
	var b bytes.Buffer
	if err := writeTorch(&b, "m", []Entry{{Name: "0.weight", Shape: []int{2}, Data: []float32{1, 2}}}, F32); err != nil {
		t.Fatal(err)
	}
	good := b.Bytes()
	for _, tc := range []struct {
		name string
		raw  []byte
		want string
	}{
		{"int storage", rezip(t, good, func(p []byte) []byte { return bytes.Replace(p, []byte("FloatStorage"), []byte("IntStorage"), 1) }), "torch.IntStorage"},
		{"other global", rezip(t, good, func(p []byte) []byte { return bytes.Replace(p, []byte("_rebuild_tensor_v2"), []byte("system"), 1) }), "torch._utils.system"},
		{"truncated pickle", rezip(t, good, func(p []byte) []byte { return p[:len(p)-3] }), "data.pkl"},
		{"not zip", []byte("PK\x03\x04 not really"), "not a zip"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := OpenTorch(bytes.NewReader(tc.raw), int64(len(tc.raw)))
			if !errors.Is(err, ErrTorchFormat) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want ErrTorchFormat naming %q", err, tc.want)
			}
		})
	}
	err := SaveTorch(filepath.Join(t.TempDir(), "m.pt"), nn.NewSequential(nn.NewLinear(rand.New(rand.NewPCG(1, 1)), 2, 2, true)), nil, WithDType(tensor.DType(7)))
	if err == nil || !strings.Contains(err.Error(), "DType(7)") || !strings.Contains(err.Error(), `"0.bias"`) {
		t.Fatalf("SaveTorch: error %v, want one naming DType(7) and tensor \"0.bias\"", err)
	}
}

// FuzzOpenTorch: no input makes the reader panic or read outside what it
// was given, and whatever it accepts reads back.
func FuzzOpenTorch(f *testing.F) {
	var b bytes.Buffer
	if err := writeTorch(&b, "m", []Entry{{Name: "a", Shape: []int{2, 3}, Data: []float32{1, 2, 3, 4, 5, 6}}, {Name: "b", Shape: []int{}, Data: []float32{7}}}, BF16); err != nil {
		f.Fatal(err)
	}
	f.Add(b.Bytes())
	f.Fuzz(func(t *testing.T, raw []byte) {
		tf, err := OpenTorch(bytes.NewReader(raw), int64(len(raw)))
		if err != nil {
			return
		}
		for name, tt := range tf.Tensors {
			n, _ := numElements(tt.Shape, tt.numel+1)
			if n > 1<<20 {
				continue
			}
			_ = tf.ReadFloat32(name, make([]float32, n))
		}
	})
}

// TestUnpickleMutations: thousands of mutations of a state dict's pickle
// (bytes changed, cut, repeated) each end in a value or an error, never
// a panic or a runaway allocation (the fuzz target's seed run reaches
// the pickle only through the zip's checksum, which most mutations fail).
func TestUnpickleMutations(t *testing.T) {
	var b bytes.Buffer
	if err := writeTorch(&b, "m", []Entry{{Name: "a", Shape: []int{2, 3}, Data: make([]float32, 6)}, {Name: "b", Shape: []int{}, Data: []float32{7}}}, BF16); err != nil {
		t.Fatal(err)
	}
	zr, err := zip.NewReader(bytes.NewReader(b.Bytes()), int64(b.Len()))
	if err != nil {
		t.Fatal(err)
	}
	rc, _ := zr.File[0].Open()
	pkl, _ := io.ReadAll(rc)
	rc.Close()
	if v, err := unpickle(pkl); err != nil {
		t.Fatalf("unmutated pickle: %v", err)
	} else if d, ok := v.(*pyDict); !ok || len(d.keys) != 2 {
		t.Fatalf("unmutated pickle gives %#v", v)
	}
	rng := rand.New(rand.NewPCG(7, 8))
	rejected := 0
	for i := 0; i < 5000; i++ {
		p := bytes.Clone(pkl)
		switch i % 3 {
		case 0:
			for range 1 + rng.IntN(4) {
				p[rng.IntN(len(p))] = byte(rng.IntN(256))
			}
		case 1:
			p = p[:rng.IntN(len(p))]
		default:
			j, k := rng.IntN(len(p)), rng.IntN(len(p))
			p = append(p[:j:j], p[min(j, k):]...)
		}
		if _, err := unpickle(p); err != nil && !errors.Is(err, ErrTorchFormat) {
			t.Fatalf("mutation %d: error %v does not wrap ErrTorchFormat", i, err)
		} else if err != nil {
			rejected++
		}
	}
	if rejected == 0 {
		t.Error("no mutation was rejected")
	}
	t.Logf("%d of 5000 mutations rejected", rejected)
}
