package checkpoint

import (
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/cohortml/cohort/models"
	"github.com/cohortml/cohort/nn"
)

// gptKeys is the state_dict() of the anchor GPT-mini (gpt_mini.py) with
// one block.
var gptKeys = []string{
	"emb.wte.weight", "emb.wpe.weight",
	"h.0.ln1.weight", "h.0.ln1.bias", "h.0.attn.qkv.weight", "h.0.attn.qkv.bias",
	"h.0.attn.proj.weight", "h.0.attn.proj.bias", "h.0.ln2.weight", "h.0.ln2.bias",
	"h.0.mlp.fc.weight", "h.0.mlp.fc.bias", "h.0.mlp.proj.weight", "h.0.mlp.proj.bias",
	"head.ln_f.weight", "head.ln_f.bias",
}

var tinyGPT = models.GPTConfig{Vocab: 256, Ctx: 16, NLayer: 1, D: 32, NHead: 4}

func newGPT(t *testing.T, seed uint64) *models.GPT {
	t.Helper()
	g, err := models.NewGPT(rand.New(rand.NewPCG(seed, 0)), tinyGPT)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// TestGPTNames checks that a GPT saved with GPTNames has exactly the
// PyTorch keys and loads back.
func TestGPTNames(t *testing.T) {
	g := newGPT(t, 1)
	path := filepath.Join(t.TempDir(), "gpt.safetensors")
	if err := SaveModel(path, g, GPTNames, map[string]string{"format": "pt"}); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, _ := f.Stat()
	h, err := ReadHeader(f, st.Size())
	if err != nil {
		t.Fatal(err)
	}
	want := slices.Sorted(slices.Values(gptKeys))
	if got := h.Names(); !slices.Equal(got, want) {
		t.Errorf("keys %q\nwant %q", got, want)
	}
	back := newGPT(t, 2)
	if err := LoadModel(path, back, GPTNames); err != nil {
		t.Fatal(err)
	}
	sameParams(t, g, back)
	if err := LoadModel(path, back, nil); err == nil {
		t.Errorf("loading PyTorch names without the map succeeded")
	}
}

// TestGPTLoadsInPyTorch loads the file into the anchor's GPT module in
// PyTorch with a strict load_state_dict and compares its logits with
// cohort's.
func TestGPTLoadsInPyTorch(t *testing.T) {
	needTorch(t)
	g := newGPT(t, 1)
	path := filepath.Join(t.TempDir(), "gpt.safetensors")
	if err := SaveModel(path, g, GPTNames, map[string]string{"format": "pt"}); err != nil {
		t.Fatal(err)
	}
	const B, T = 2, 5
	ids := []int64{3, 250, 7, 7, 100, 0, 1, 2, 255, 42}
	var res struct {
		Keys   []string
		Logits []float64
	}
	runTorch(t, &res, "gpt_load.py", append([]string{path}, intArgs([]int{tinyGPT.Vocab, tinyGPT.Ctx, tinyGPT.NLayer, tinyGPT.D, tinyGPT.NHead, B, T}, ids)...)...)
	if !slices.Equal(res.Keys, gptKeys) {
		t.Errorf("PyTorch state_dict keys %q\nwant %q", res.Keys, gptKeys)
	}
	defer nn.NoGrad(g)()
	want := g.Forward(ids, B, T).Value.Data()
	if len(res.Logits) != len(want) {
		t.Fatalf("%d logits from PyTorch, %d from cohort", len(res.Logits), len(want))
	}
	worst := 0.0
	for i, v := range want {
		worst = max(worst, math.Abs(float64(v)-res.Logits[i]))
	}
	t.Logf("largest logit difference cohort vs PyTorch: %.3g", worst)
	if worst > 1e-4 {
		t.Errorf("logits differ by up to %g, want ≤ 1e-4 (float32 rounding)", worst)
	}
}
