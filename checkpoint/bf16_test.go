package checkpoint

import (
	"bytes"
	"encoding/binary"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cohortml/cohort/nn"
	"github.com/cohortml/cohort/tensor"
)

// bf16Ref is the scalar reference of float32 → bfloat16, round to
// nearest, ties to even (NaN made quiet), written out here so that the
// writer is checked against something it does not call.
func bf16Ref(f float32) uint16 {
	u := math.Float32bits(f)
	if f != f {
		return uint16(u>>16) | 0x40
	}
	return uint16((u + 0x7fff + (u>>16)&1) >> 16)
}

// bf16Values are the cases every bf16 write is checked on: ties to even
// both ways, the largest finite float32 (overflows to Inf), signed zero,
// float32 subnormals (kept, rounded like any other value), infinities and
// a signalling NaN (made quiet).
var bf16Values = []float32{
	1, -1, 1 + 0x1p-8, 1 + 3*0x1p-8, 1 + 0x1p-8 + 0x1p-20, -(1 + 3*0x1p-8),
	math.MaxFloat32, -math.MaxFloat32, 0, float32(math.Copysign(0, -1)),
	0x1p-149, 0x1p-130 * 1.5, -0x1p-140 * 1.00390625,
	float32(math.Inf(1)), float32(math.Inf(-1)), math.Float32frombits(0x7f800001),
	3.14159265, 65504, -2.5e-3,
}

func TestWriteBF16(t *testing.T) {
	data := slices.Clone(bf16Values)
	rng := rand.New(rand.NewPCG(3, 4))
	for range 100 { // past the 32-element vector blocks
		data = append(data, float32(rng.NormFloat64()))
	}
	var b bytes.Buffer
	if _, err := Write(&b, []Entry{{Name: "w", Shape: []int{len(data)}, Data: data}, {Name: "s", Shape: []int{}, Data: []float32{0.1}}},
		map[string]string{"format": "pt"}, WithDType(tensor.BFloat16)); err != nil {
		t.Fatal(err)
	}
	raw := b.Bytes()
	hl := binary.LittleEndian.Uint64(raw)
	header := strings.TrimRight(string(raw[8:8+hl]), " ")
	want := `{"__metadata__":{"format":"pt"},"s":{"dtype":"BF16","shape":[],"data_offsets":[0,2]},"w":{"dtype":"BF16","shape":[119],"data_offsets":[2,240]}}`
	if header != want {
		t.Errorf("header\n%s\nwant\n%s", header, want)
	}
	buf := raw[8+hl:]
	if len(buf) != 2*(len(data)+1) {
		t.Fatalf("%d data bytes, want %d", len(buf), 2*(len(data)+1))
	}
	if got := binary.LittleEndian.Uint16(buf); got != bf16Ref(0.1) {
		t.Errorf("s = %#04x, want %#04x", got, bf16Ref(0.1))
	}
	for i, v := range data {
		if got, want := binary.LittleEndian.Uint16(buf[2+2*i:]), bf16Ref(v); got != want {
			t.Errorf("w[%d] = %g: bits %#04x, want %#04x", i, v, got, want)
		}
	}
	// Read back: each value widened exactly from its bits.
	got, err := openBytes(t, raw).Tensor("w")
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range got.Data() {
		if want := math.Float32frombits(uint32(bf16Ref(data[i])) << 16); math.Float32bits(v) != math.Float32bits(want) {
			t.Errorf("read w[%d] = %g (%#08x), want %g", i, v, math.Float32bits(v), want)
		}
	}
}

func TestWriteBadDType(t *testing.T) {
	e := []Entry{{Name: "b", Shape: []int{1}, Data: []float32{1}}, {Name: "a.weight", Shape: []int{1}, Data: []float32{1}}}
	_, err := Write(&bytes.Buffer{}, e, nil, WithDType(tensor.DType(9)))
	if err == nil || !strings.Contains(err.Error(), `tensor "a.weight"`) || !strings.Contains(err.Error(), "DType(9)") {
		t.Fatalf("error %v, want one naming tensor \"a.weight\" and DType(9)", err)
	}
	path := filepath.Join(t.TempDir(), "m.safetensors")
	net := nn.NewSequential(nn.NewLinear(rand.New(rand.NewPCG(1, 1)), 2, 2, true))
	err = SaveModel(path, net, nil, nil, WithDType(tensor.DType(9)))
	if err == nil || !strings.Contains(err.Error(), "DType(9)") {
		t.Fatalf("SaveModel: error %v, want one naming DType(9)", err)
	}
	if ents, _ := os.ReadDir(filepath.Dir(path)); len(ents) != 0 {
		t.Errorf("a failed SaveModel left %d files", len(ents))
	}
}

// TestSaveModelBF16 saves a float32 model as bf16 and loads it into
// another: every parameter is its value rounded to nearest even, and a
// second round trip changes nothing.
func TestSaveModelBF16(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	net := nn.NewSequential(nn.NewLinear(rng, 40, 30, true), nn.ReLU{}, nn.NewLinear(rng, 30, 2, true))
	copy(nn.StateDict(net)["0.bias"].Data(), bf16Values)
	dir := t.TempDir()
	p1, p2 := filepath.Join(dir, "a.safetensors"), filepath.Join(dir, "b.safetensors")
	if err := SaveModel(p1, net, nil, nil, WithDType(tensor.BFloat16)); err != nil {
		t.Fatal(err)
	}
	back := nn.NewSequential(nn.NewLinear(rng, 40, 30, true), nn.ReLU{}, nn.NewLinear(rng, 30, 2, true))
	if err := LoadModel(p1, back, nil); err != nil {
		t.Fatal(err)
	}
	want, got := nn.StateDict(net), nn.StateDict(back)
	for k, w := range want {
		for i, v := range w.Data() {
			r := math.Float32frombits(uint32(bf16Ref(v)) << 16)
			if g := got[k].Data()[i]; math.Float32bits(g) != math.Float32bits(r) {
				t.Fatalf("%s[%d]: loaded %g, want %g rounded to bf16 = %g", k, i, g, v, r)
			}
		}
	}
	if err := SaveModel(p2, back, nil, nil, WithDType(tensor.BFloat16)); err != nil {
		t.Fatal(err)
	}
	a, _ := os.ReadFile(p1)
	b, _ := os.ReadFile(p2)
	if !bytes.Equal(a, b) {
		t.Error("saving the loaded bf16 model again gives other bytes")
	}
}

// bf16Net is the module testdata/bf16_torch.py builds.
func bf16Net() *nn.Sequential {
	rng := rand.New(rand.NewPCG(9, 9))
	return nn.NewSequential(nn.NewLinear(rng, 4, 3, true), nn.ReLU{}, nn.NewLinear(rng, 3, 2, true))
}

// TestBF16FromPyTorch: the state dict of a bf16 PyTorch module, saved as
// safetensors and with torch.save, loads into the float32 module with every value equal to
// PyTorch's bf16 bits widened.
func TestBF16FromPyTorch(t *testing.T) {
	needTorch(t)
	dir := t.TempDir()
	var res struct {
		Impl string
		Bits map[string][]uint16
	}
	runTorch(t, &res, "bf16_torch.py", "write", dir)
	t.Logf("written by PyTorch (%s)", res.Impl)
	for _, file := range []string{"model.safetensors", "model.pt"} {
		t.Run(file, func(t *testing.T) {
			net := bf16Net()
			load := LoadModel
			if file == "model.pt" {
				load = LoadTorch
			}
			if err := load(filepath.Join(dir, file), net, nil); err != nil {
				t.Fatal(err)
			}
			sameBF16(t, nn.StateDict(net), res.Bits)
		})
	}
}

// sameBF16 checks that every value of sd is the bfloat16 of bits widened.
func sameBF16(t *testing.T, sd map[string]*tensor.Tensor, bits map[string][]uint16) {
	t.Helper()
	res := struct{ Bits map[string][]uint16 }{bits}
	if len(sd) != len(res.Bits) {
		t.Fatalf("module has %d tensors, PyTorch's state dict %d", len(sd), len(res.Bits))
	}
	for k, bits := range res.Bits {
		got := sd[k].Data()
		if len(got) != len(bits) {
			t.Fatalf("%s: %d values, PyTorch %d", k, len(got), len(bits))
		}
		for i, h := range bits {
			if want := math.Float32frombits(uint32(h) << 16); math.Float32bits(got[i]) != math.Float32bits(want) {
				t.Errorf("%s[%d] = %g, want %g (bf16 %#04x)", k, i, got[i], want, h)
			}
		}
	}
}

// TestBF16LoadsInPyTorch: a float32 model saved here as F32 and as BF16
// safetensors and as a bf16 torch.save file loads in PyTorch, and the
// BF16 tensors are bit for bit PyTorch's own .to(torch.bfloat16) of the
// F32 ones.
func TestBF16LoadsInPyTorch(t *testing.T) {
	needTorch(t)
	net := bf16Net()
	copy(nn.StateDict(net)["0.weight"].Data(), bf16Values) // 12 of them
	dir := t.TempDir()
	f32, b16, pt := filepath.Join(dir, "f32.safetensors"), filepath.Join(dir, "bf16.safetensors"), filepath.Join(dir, "bf16.pt")
	if err := SaveModel(f32, net, nil, map[string]string{"format": "pt"}); err != nil {
		t.Fatal(err)
	}
	if err := SaveModel(b16, net, nil, map[string]string{"format": "pt"}, WithDType(tensor.BFloat16)); err != nil {
		t.Fatal(err)
	}
	if err := SaveTorch(pt, net, nil, WithDType(tensor.BFloat16)); err != nil {
		t.Fatal(err)
	}
	out := runTorch(t, nil, "bf16_torch.py", "read", f32, b16, pt)
	t.Logf("PyTorch: %s", bytes.TrimSpace(out))
}
