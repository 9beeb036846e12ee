package checkpoint

import (
	"bytes"
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cohortml/cohort/models"
	"github.com/cohortml/cohort/nn"
)

// gpt2Keys are the keys of transformers' GPT2LMHeadModel with one block,
// as save_pretrained writes them (no tied lm_head), with their shapes for
// tinyGPT (d 32, context 16, vocab 256).
var gpt2Keys = map[string][]int{
	"transformer.wte.weight":             {256, 32},
	"transformer.wpe.weight":             {16, 32},
	"transformer.h.0.ln_1.weight":        {32},
	"transformer.h.0.ln_1.bias":          {32},
	"transformer.h.0.attn.c_attn.weight": {32, 96},
	"transformer.h.0.attn.c_attn.bias":   {96},
	"transformer.h.0.attn.c_proj.weight": {32, 32},
	"transformer.h.0.attn.c_proj.bias":   {32},
	"transformer.h.0.ln_2.weight":        {32},
	"transformer.h.0.ln_2.bias":          {32},
	"transformer.h.0.mlp.c_fc.weight":    {32, 128},
	"transformer.h.0.mlp.c_fc.bias":      {128},
	"transformer.h.0.mlp.c_proj.weight":  {128, 32},
	"transformer.h.0.mlp.c_proj.bias":    {32},
	"transformer.ln_f.weight":            {32},
	"transformer.ln_f.bias":              {32},
}

// TestGPT2Entries checks the keys, shapes and Conv1D layout of a GPT saved
// in GPT-2's format.
func TestGPT2Entries(t *testing.T) {
	g := newGPT(t, 1)
	entries := GPT2Entries(g)
	got := map[string]Entry{}
	for _, e := range entries {
		got[e.Name] = e
	}
	for k, s := range gpt2Keys {
		e, ok := got[k]
		if !ok {
			t.Errorf("no entry %q", k)
		} else if !slices.Equal(e.Shape, s) {
			t.Errorf("%q has shape %v, want %v", k, e.Shape, s)
		}
	}
	if len(got) != len(gpt2Keys) {
		t.Errorf("%d entries, want %d: %v", len(got), len(gpt2Keys), slices.Sorted(func(yield func(string) bool) {
			for k := range got {
				if !yield(k) {
					return
				}
			}
		}))
	}
	// c_attn.weight[i, j] = qkv.weight[j, i]: input i, output j (q | k | v).
	w := g.Blocks[0].Attn.QKV.Weight.Value
	c := got["transformer.h.0.attn.c_attn.weight"]
	for _, ij := range [][2]int{{0, 0}, {1, 0}, {0, 1}, {31, 95}, {5, 40}, {7, 70}} {
		i, j := ij[0], ij[1]
		if a, b := c.Data[i*96+j], w.At(j, i); a != b {
			t.Errorf("c_attn.weight[%d, %d] = %g, qkv.weight[%d, %d] = %g", i, j, a, j, i, b)
		}
	}
}

// TestGPT2RoundTrip saves a GPT in GPT-2's format and loads it into a GPT
// built from another seed: every parameter and the logits come back
// exactly.
func TestGPT2RoundTrip(t *testing.T) {
	g := newGPT(t, 1)
	path := filepath.Join(t.TempDir(), "model.safetensors")
	if err := SaveGPT2(path, g); err != nil {
		t.Fatal(err)
	}
	back := newGPT(t, 2)
	if err := LoadGPT2(path, back); err != nil {
		t.Fatal(err)
	}
	sameParams(t, g, back)
	ids := []int64{1, 2, 3, 200, 9, 9}
	defer nn.NoGrad(g)()
	defer nn.NoGrad(back)()
	if !bitsEqual(g.Forward(ids, 2, 3).Value.Data(), back.Forward(ids, 2, 3).Value.Data()) {
		t.Errorf("logits differ after a round trip")
	}
}

// TestGPT2Variants loads the forms of GPT-2 files found in the wild, and
// refuses the ones GPT cannot represent.
func TestGPT2Variants(t *testing.T) {
	g := newGPT(t, 1)
	base := GPT2Entries(g)
	wte := g.Wte.Value.Contiguous().Data()
	other := slices.Clone(wte)
	other[7] += 1
	maskBuf := make([]float32, 16*16)
	for _, tc := range []struct {
		name    string
		edit    func([]Entry) []Entry
		wantErr error  // nil: loads and equals g
		errText string // also in the error
	}{
		{"save_pretrained", func(e []Entry) []Entry { return e }, nil, ""},
		{"tied_head_present", func(e []Entry) []Entry {
			return append(e, Entry{Name: "lm_head.weight", Shape: []int{256, 32}, Data: wte})
		}, nil, ""},
		{"mask_buffers", func(e []Entry) []Entry {
			return append(e,
				Entry{Name: "transformer.h.0.attn.bias", Shape: []int{1, 1, 16, 16}, Data: maskBuf},
				Entry{Name: "transformer.h.0.attn.masked_bias", Shape: []int{}, Data: []float32{-1e4}})
		}, nil, ""},
		{"no_prefix", func(e []Entry) []Entry {
			for i := range e {
				e[i].Name = strings.TrimPrefix(e[i].Name, "transformer.")
			}
			return append(e, Entry{Name: "h.0.attn.bias", Shape: []int{1, 1, 16, 16}, Data: maskBuf})
		}, nil, ""},
		{"untied_head", func(e []Entry) []Entry {
			return append(e, Entry{Name: "lm_head.weight", Shape: []int{256, 32}, Data: other})
		}, errUntiedHead, "element 7"},
		{"missing_ln_f", func(e []Entry) []Entry {
			return slices.DeleteFunc(e, func(x Entry) bool { return x.Name == "transformer.ln_f.bias" })
		}, ErrKeys, `missing keys ["transformer.ln_f.bias"]`},
		{"linear_layout", func(e []Entry) []Entry {
			for i := range e {
				if e[i].Name == "transformer.h.0.mlp.c_fc.weight" {
					e[i].Shape = []int{128, 32}
				}
			}
			return e
		}, ErrKeys, `"transformer.h.0.mlp.c_fc.weight" has shape [32 128], the module [128 32]`},
		{"extra_block", func(e []Entry) []Entry {
			return append(e, Entry{Name: "transformer.h.1.ln_1.bias", Shape: []int{32}, Data: make([]float32, 32)})
		}, ErrKeys, `unexpected keys ["transformer.h.1.ln_1.bias"]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			entries := tc.edit(slices.Clone(base))
			path := filepath.Join(t.TempDir(), "model.safetensors")
			var buf bytes.Buffer
			if _, err := Write(&buf, entries, map[string]string{"format": "pt"}); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
				t.Fatal(err)
			}
			back := newGPT(t, 2)
			err := LoadGPT2(path, back)
			if tc.wantErr == nil {
				if err != nil {
					t.Fatal(err)
				}
				sameParams(t, g, back)
				return
			}
			if !errors.Is(err, tc.wantErr) || !strings.Contains(err.Error(), tc.errText) {
				t.Fatalf("error %v, want one wrapping %v containing %q", err, tc.wantErr, tc.errText)
			}
			fresh := newGPT(t, 2)
			sameParams(t, fresh, back) // nothing loaded
		})
	}
}

// TestGPT2FromPyTorch builds a small GPT-2 in PyTorch (transformers'
// GPT2LMHeadModel where it is installed, else a literal re-implementation
// of its forward pass under its parameter names and layout), saves it as
// transformers does, loads the file into a models.GPT and compares the
// logits on the same token ids.
func TestGPT2FromPyTorch(t *testing.T) {
	needTorch(t)
	cfg := models.GPTConfig{Vocab: 97, Ctx: 32, NLayer: 2, D: 64, NHead: 4}
	const B, T, seed = 2, 11, 5
	ids := make([]int64, B*T)
	for i := range ids {
		ids[i] = int64(i*37+5) % int64(cfg.Vocab)
	}
	path := filepath.Join(t.TempDir(), "model.safetensors")
	var res struct {
		Impl   string
		Logits []float64
	}
	runTorch(t, &res, "gpt2_hf.py", append([]string{path}, intArgs([]int{cfg.Vocab, cfg.Ctx, cfg.NLayer, cfg.D, cfg.NHead, seed, B, T}, ids)...)...)
	g, err := models.NewGPT(rand.New(rand.NewPCG(1, 1)), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := LoadGPT2(path, g); err != nil {
		t.Fatal(err)
	}
	defer nn.NoGrad(g)()
	got := g.Forward(ids, B, T).Value.Data()
	if len(res.Logits) != len(got) {
		t.Fatalf("%d logits from PyTorch, %d from cohort", len(res.Logits), len(got))
	}
	var diff, norm, worst float64
	for i, v := range got {
		d := float64(v) - res.Logits[i]
		diff += d * d
		norm += res.Logits[i] * res.Logits[i]
		worst = max(worst, math.Abs(d))
	}
	rel := math.Sqrt(diff / norm)
	t.Logf("PyTorch model: %s; ‖cohort − PyTorch‖/‖PyTorch‖ = %.3g, largest difference %.3g", res.Impl, rel, worst)
	if rel > 1e-4 {
		t.Errorf("logits differ by %.3g relative, want ≤ 1e-4 (float32 rounding)", rel)
	}
}
