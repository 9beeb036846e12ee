package checkpoint

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/cohortml/cohort/nn"
	"github.com/cohortml/cohort/tensor"
)

// GPT2Names maps models.GPT's names to the keys of Hugging Face
// transformers' GPT2LMHeadModel: "wte" → "transformer.wte.weight", "wpe" →
// "transformer.wpe.weight", and in block i "ln1", "attn.qkv", "attn.proj",
// "ln2", "mlp.fc", "mlp.proj" → "transformer.h.i." + "ln_1", "attn.c_attn",
// "attn.c_proj", "ln_2", "mlp.c_fc", "mlp.c_proj"; "ln_f.*" →
// "transformer.ln_f.*". The names alone do not make a GPT-2 file: its
// projections are stored transposed (see SaveGPT2).
func GPT2Names(name string) string {
	if s, ok := outerName(name, "transformer.", "transformer."); ok {
		return s
	}
	rest, ok := strings.CutPrefix(name, "h.")
	i := strings.IndexByte(rest, '.')
	if !ok || i < 0 {
		return name
	}
	layer, sub := rest[:i], rest[i+1:]
	for _, r := range gpt2Sublayers {
		if s, ok := strings.CutPrefix(sub, r[0]); ok {
			return "transformer.h." + layer + "." + r[1] + s
		}
	}
	return name
}

// gpt2Sublayers pairs a block's module names in models.GPT with GPT-2's.
var gpt2Sublayers = [...][2]string{
	{"ln1.", "ln_1."}, {"ln2.", "ln_2."},
	{"attn.qkv.", "attn.c_attn."}, {"attn.proj.", "attn.c_proj."},
	{"mlp.fc.", "mlp.c_fc."}, {"mlp.proj.", "mlp.c_proj."},
}

// gpt2Conv1D reports whether the cohort parameter name is a projection
// weight that GPT-2 stores in its Conv1D layout [in, out], the transpose
// of Linear's [out, in]. The qkv projection's rows q | k | v become
// c_attn's columns in the same order, as GPT-2 splits them.
func gpt2Conv1D(name string) bool {
	if !strings.HasPrefix(name, "h.") {
		return false
	}
	for _, s := range []string{".attn.qkv.weight", ".attn.proj.weight", ".mlp.fc.weight", ".mlp.proj.weight"} {
		if strings.HasSuffix(name, s) {
			return true
		}
	}
	return false
}

// gpt2Buffers matches the non-parameter tensors older transformers
// versions keep in a GPT-2 state dict: each block's causal mask
// ("attn.bias", [1, 1, ctx, ctx]) and its fill value ("attn.masked_bias").
// The model computes both; a load skips them.
var gpt2Buffers = regexp.MustCompile(`^transformer\.h\.[0-9]+\.attn\.(bias|masked_bias)$`)

const (
	gpt2Head = "lm_head.weight"
	gpt2Wte  = "transformer.wte.weight"
)

// GPT2Entries returns m's tensors as a GPT-2 file holds them: named by
// GPT2Names, the four projection weights of each block transposed to
// Conv1D's [in, out], in name order. m must have models.GPT's parameter
// names. The tied head has no entry of its own, as in transformers'
// save_pretrained. Entries of transposed weights are copies; the others
// alias m's tensors when they are contiguous.
func GPT2Entries(m nn.Module) []Entry {
	sd := nn.StateDict(m)
	out := make([]Entry, 0, len(sd))
	for name, t := range sd {
		e := Entry{Name: GPT2Names(name), Shape: slices.Clone(t.Shape()), Data: t.Contiguous().Data()}
		if gpt2Conv1D(name) && t.Dims() == 2 {
			e.Shape = []int{t.Dim(1), t.Dim(0)}
			e.Data = t.Transpose(0, 1).Contiguous().Data()
		}
		out = append(out, e)
	}
	return sortedEntries(out)
}

// SaveGPT2 writes m (a models.GPT) to path as the safetensors file
// transformers' GPT2LMHeadModel.save_pretrained writes (see GPT2Entries),
// with metadata {"format": "pt"}, atomically; F32 unless an option says
// otherwise (WithDType(tensor.BFloat16) for a bf16 checkpoint).
func SaveGPT2(path string, m nn.Module, opts ...WriteOption) error {
	return saveEntries(path, GPT2Entries(m), map[string]string{"format": "pt"}, opts...)
}

// LoadGPT2 reads a GPT-2 safetensors file as transformers writes it into
// m, a models.GPT of the file's shape (models.GPT2() for GPT-2 small). It
// accepts:
//   - keys with the "transformer." prefix (GPT2LMHeadModel) or without it
//     (GPT2Model, as in the original openai-community/gpt2 upload);
//   - "lm_head.weight" absent (save_pretrained drops the tied copy) or
//     present and equal to the token embedding (an error otherwise: GPT
//     ties them and cannot hold a separate head);
//   - the attention mask buffers "attn.bias" and "attn.masked_bias" of
//     older versions, which are skipped;
//   - F32, F16 and BF16 (and F64) tensors, converted to float32.
//
// Any other missing, unexpected or misshapen key fails the whole load with
// an error wrapping ErrKeys that lists them, and then nothing is loaded.
func LoadGPT2(path string, m nn.Module) error {
	return openFile(path, NewFile, func(sf *File) error { return loadGPT2(sf, m) })
}

func loadGPT2(sf *File, m nn.Module) error {
	// The file key of each canonical ("transformer."-prefixed) key.
	prefixed := false
	for k := range sf.Tensors {
		if strings.HasPrefix(k, "transformer.") {
			prefixed = true
			break
		}
	}
	fileKey := map[string]string{}
	for k := range sf.Tensors {
		c := k
		if !prefixed && k != gpt2Head {
			c = "transformer." + k
		}
		fileKey[c] = k
	}
	// The shapes loadModule checks, in the module's layout.
	transposed := map[string]bool{}
	for name := range nn.StateDict(m) {
		if gpt2Conv1D(name) {
			transposed[GPT2Names(name)] = true
		}
	}
	shapes := map[string][]int{}
	for c, k := range fileKey {
		if c == gpt2Head || gpt2Buffers.MatchString(c) {
			continue
		}
		s := slices.Clone(sf.Tensors[k].Shape)
		if transposed[c] && len(s) == 2 {
			s[0], s[1] = s[1], s[0]
		}
		shapes[c] = s
	}
	if k, ok := fileKey[gpt2Head]; ok {
		if err := checkTiedHead(sf, k, fileKey[gpt2Wte]); err != nil {
			return err
		}
	}
	err := loadModule(m, GPT2Names, shapes, func(c string, dst []float32) error {
		k := fileKey[c]
		if !transposed[c] {
			return sf.ReadFloat32(k, 0, dst)
		}
		s := sf.Tensors[k].Shape // [in, out]
		t := tensor.New(s...)
		if err := sf.ReadFloat32(k, 0, t.Data()); err != nil {
			return err
		}
		copy(dst, t.Transpose(0, 1).Contiguous().Data())
		return nil
	})
	if errors.Is(err, ErrKeys) && strings.Contains(err.Error(), "shape mismatch") {
		err = fmt.Errorf("%w (Conv1D weights' shapes shown transposed, as [out, in])", err)
	}
	return err
}

// errUntiedHead is wrapped when a file's lm_head differs from its wte.
var errUntiedHead = errors.New("checkpoint: lm_head.weight differs from transformer.wte.weight, and GPT ties its head to the token embedding")

// checkTiedHead checks that the file's head (key head) equals its token
// embedding (key wte, "" when the file has none, which loadModule then
// reports as missing).
func checkTiedHead(sf *File, head, wte string) error {
	if wte == "" {
		return nil
	}
	hs, ws := sf.Tensors[head].Shape, sf.Tensors[wte].Shape
	if !slices.Equal(hs, ws) {
		return fmt.Errorf("%w: %q has shape %v, %q %v", ErrKeys, head, hs, wte, ws)
	}
	h, err := sf.Tensor(head)
	if err != nil {
		return err
	}
	w, err := sf.Tensor(wte)
	if err != nil {
		return err
	}
	for i, v := range h.Data() {
		if v != w.Data()[i] {
			return fmt.Errorf("%w (element %d: %g vs %g)", errUntiedHead, i, v, w.Data()[i])
		}
	}
	return nil
}
