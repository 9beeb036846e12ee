package checkpoint

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"

	"github.com/cohortml/cohort/nn"
	"github.com/cohortml/cohort/tensor"
)

// ErrKeys is wrapped by the error a load returns when the file's tensor
// names or shapes do not match the module's.
var ErrKeys = errors.New("checkpoint: tensor names do not match the module")

// NameMap maps a cohort state-dict name to the key PyTorch's state_dict()
// uses for the same tensor. nil is the identity, right for every module
// whose names already follow PyTorch's (nn.Sequential children are "0",
// "1", …, as in torch.nn.Sequential, so the MLP and LeNet need no map).
type NameMap func(name string) string

func (f NameMap) apply(name string) string {
	if f == nil {
		return name
	}
	return f(name)
}

// GPTNames maps models.GPT's names to those of the anchor GPT-mini in
// PyTorch (../shared/anchors/gpt_mini.py): "wte" → "emb.wte.weight", "wpe"
// → "emb.wpe.weight", "ln_f.*" → "head.ln_f.*"; the blocks' "h.<i>.*"
// names are the same in both. The tied output head has no tensor of its
// own in either.
func GPTNames(name string) string {
	if s, ok := outerName(name, "emb.", "head."); ok {
		return s
	}
	return name
}

// outerName names models.GPT's tensors outside the blocks in another
// model's layout: the embeddings "wte" and "wpe" as emb + name +
// ".weight", the final norm's "ln_f.*" as head + name. ok is false for
// every other name.
func outerName(name, emb, head string) (string, bool) {
	switch {
	case name == "wte", name == "wpe":
		return emb + name + ".weight", true
	case strings.HasPrefix(name, "ln_f."):
		return head + name, true
	}
	return "", false
}

// ModuleEntries returns m's parameters and buffers as entries named by
// names, in name order. The data alias the module's live tensors when
// they are contiguous.
func ModuleEntries(m nn.Module, names NameMap) []Entry {
	sd := nn.StateDict(m)
	out := make([]Entry, 0, len(sd))
	for k, t := range sd {
		out = append(out, Entry{Name: names.apply(k), Shape: slices.Clone(t.Shape()), Data: t.Contiguous().Data()})
	}
	return sortedEntries(out)
}

// SaveModel writes m's parameters and buffers to path as a safetensors
// file named by names, atomically (a temporary file renamed over path
// after an fsync). metadata goes into "__metadata__"; PyTorch tools expect
// {"format": "pt"}. Tensors are F32; WithDType(tensor.BFloat16) writes
// BF16, the file a bf16 PyTorch model's save_file writes, which loads
// back (LoadModel) widened exactly.
func SaveModel(path string, m nn.Module, names NameMap, metadata map[string]string, opts ...WriteOption) error {
	return saveEntries(path, ModuleEntries(m, names), metadata, opts...)
}

// saveEntries writes entries and metadata to path as a safetensors file,
// atomically.
func saveEntries(path string, entries []Entry, metadata map[string]string, opts ...WriteOption) error {
	_, _, err := writeAtomic(path, nil, func(w io.Writer) error {
		_, err := Write(w, entries, metadata, opts...)
		return err
	})
	return err
}

// LoadModel reads a safetensors file written by SaveModel (or by
// PyTorch's safetensors.torch.save_file for the equivalent module) into
// m. The file's keys must be exactly m's names mapped by names: missing
// keys, unexpected keys and shape mismatches are all listed in one error
// wrapping ErrKeys, and then nothing is loaded.
func LoadModel(path string, m nn.Module, names NameMap) error {
	return openFile(path, NewFile, func(sf *File) error {
		return loadModule(m, names, sf.shapes(), func(key string, dst []float32) error {
			return sf.ReadFloat32(key, 0, dst)
		})
	})
}

// readFile runs read on the file at path and its size. An error opening
// or sizing the file is prefixed "checkpoint: ", one of read's with path.
func readFile(path string, read func(f *os.File, size int64) error) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	if err := read(f, st.Size()); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// openFile runs use on the file at path opened by open (NewFile,
// OpenTorch); errors are readFile's.
func openFile[F any](path string, open func(r io.ReaderAt, size int64) (F, error), use func(F) error) error {
	return readFile(path, func(f *os.File, size int64) error {
		x, err := open(f, size)
		if err != nil {
			return err
		}
		return use(x)
	})
}

// loadModule loads m from a source that has tensors of the given shapes
// by key, read by read. It checks every key first (naming the missing,
// the unexpected and the misshapen ones), reads every tensor into a
// scratch state dict, and only then copies into m.
func loadModule(m nn.Module, names NameMap, shapes map[string][]int, read func(key string, dst []float32) error) error {
	own := nn.StateDict(m)
	byKey := map[string]string{} // file key → cohort name
	for name := range own {
		byKey[names.apply(name)] = name
	}
	var missing, unexpected, misshapen []string
	for _, key := range slices.Sorted(maps.Keys(byKey)) {
		shape, ok := shapes[key]
		switch {
		case !ok:
			missing = append(missing, key)
		case !slices.Equal(shape, own[byKey[key]].Shape()):
			misshapen = append(misshapen, fmt.Sprintf("%q has shape %v, the module %v", key, shape, own[byKey[key]].Shape()))
		}
	}
	for _, key := range slices.Sorted(maps.Keys(shapes)) {
		if _, ok := byKey[key]; !ok {
			unexpected = append(unexpected, key)
		}
	}
	if len(missing)+len(unexpected)+len(misshapen) > 0 {
		var parts []string
		if len(missing) > 0 {
			parts = append(parts, fmt.Sprintf("missing keys %q", missing))
		}
		if len(unexpected) > 0 {
			parts = append(parts, fmt.Sprintf("unexpected keys %q", unexpected))
		}
		if len(misshapen) > 0 {
			parts = append(parts, "shape mismatch: "+strings.Join(misshapen, ", "))
		}
		return fmt.Errorf("%w: %s", ErrKeys, strings.Join(parts, "; "))
	}
	sd := make(map[string]*tensor.Tensor, len(own))
	for key, name := range byKey {
		t := tensor.New(own[name].Shape()...)
		if err := read(key, t.Data()); err != nil {
			return err
		}
		sd[name] = t
	}
	return nn.LoadStateDict(m, sd)
}
