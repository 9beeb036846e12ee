package ddp

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/cohortml/cohort/distributed"
)

// TestHalfGolden checks the float32 → fp16/bf16 roundings bit for bit
// against PyTorch (testdata/half.json, made by testdata/make_half.py), and
// that widening back is exact.
func TestHalfGolden(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("testdata", "half.json"))
	if err != nil {
		t.Fatal(err)
	}
	var g struct {
		Cases [][3]uint32 `json:"cases"`
	}
	if err := json.Unmarshal(raw, &g); err != nil {
		t.Fatal(err)
	}
	if len(g.Cases) < 400 {
		t.Fatalf("golden has %d cases, want ≥ 400", len(g.Cases))
	}
	for _, c := range g.Cases {
		f := math.Float32frombits(c[0])
		if math.IsNaN(float64(f)) { // any NaN pattern will do
			if !math.IsNaN(float64(distributed.FP16ToFloat32(distributed.FP16FromFloat32(f)))) || !math.IsNaN(float64(distributed.BF16ToFloat32(distributed.BF16FromFloat32(f)))) {
				t.Errorf("NaN %#08x did not stay NaN", c[0])
			}
			continue
		}
		if got := distributed.FP16FromFloat32(f); uint32(got) != c[1] {
			t.Errorf("dist.FP16FromFloat32(%g [%#08x]) = %#04x, want %#04x", f, c[0], got, c[1])
		}
		if got := distributed.BF16FromFloat32(f); uint32(got) != c[2] {
			t.Errorf("dist.BF16FromFloat32(%g [%#08x]) = %#04x, want %#04x", f, c[0], got, c[2])
		}
	}
}

// TestHalfRoundTrip widens every 16-bit pattern and narrows it back: each
// non-NaN value must survive unchanged, NaN must stay NaN.
func TestHalfRoundTrip(t *testing.T) {
	formats := []struct {
		name  string
		to    func(float32) uint16
		from  func(uint16) float32
		isNaN func(uint16) bool
	}{
		{"fp16", distributed.FP16FromFloat32, distributed.FP16ToFloat32, func(h uint16) bool { return h&0x7c00 == 0x7c00 && h&0x3ff != 0 }},
		{"bf16", distributed.BF16FromFloat32, distributed.BF16ToFloat32, func(h uint16) bool { return h&0x7f80 == 0x7f80 && h&0x7f != 0 }},
	}
	for _, f := range formats {
		t.Run(f.name, func(t *testing.T) {
			for i := 0; i < 1<<16; i++ {
				h := uint16(i)
				v := f.from(h)
				if f.isNaN(h) {
					if !math.IsNaN(float64(v)) || !f.isNaN(f.to(v)) {
						t.Fatalf("%#04x: NaN did not survive (%g, %#04x)", h, v, f.to(v))
					}
					continue
				}
				if got := f.to(v); got != h {
					t.Fatalf("%#04x → %g → %#04x", h, v, got)
				}
			}
		})
	}
}
