package checkpoint

import (
	"encoding/binary"
	"fmt"
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

var dumpTiny = models.GPTConfig{Vocab: 256, Ctx: 8, NLayer: 1, D: 16, NHead: 2}

// writeDump writes a dump file of numel zero floats (or of data) with a
// manifest listing tensors, as gpt_bench.py --dump-init does.
func writeDump(t *testing.T, name string, data []float32, numel int, tensors string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	b := make([]byte, 4*numel)
	for i, v := range data {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
	}
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p+".json", fmt.Appendf(nil, `{"numel": %d, "tensors": [%s]}`, numel, tensors), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// A dump of one model's parameters loads into another, exactly.
func TestLoadDump(t *testing.T) {
	src, err := models.NewGPT(rand.New(rand.NewPCG(1, 0)), dumpTiny)
	if err != nil {
		t.Fatal(err)
	}
	var data []float32
	var entries []string
	for _, p := range src.NamedParameters() {
		shape := strings.ReplaceAll(fmt.Sprint(p.Param.Value.Shape()), " ", ", ")
		entries = append(entries, fmt.Sprintf(`{"name": %q, "shape": %s, "offset": %d}`, p.Name, shape, len(data)))
		data = append(data, p.Param.Value.Data()...)
	}
	path := writeDump(t, "init.bin", data, len(data), strings.Join(entries, ", "))
	dst, err := models.NewGPT(rand.New(rand.NewPCG(2, 0)), dumpTiny)
	if err != nil {
		t.Fatal(err)
	}
	if err := LoadDump(path, dst); err != nil {
		t.Fatal(err)
	}
	want := nn.StateDict(src)
	for name, got := range nn.StateDict(dst) {
		if !slices.Equal(got.Data(), want[name].Data()) {
			t.Errorf("%s differs after LoadDump", name)
		}
	}
}

// A manifest that does not fit the model or the data file is an error
// naming the problem.
func TestLoadDumpErrors(t *testing.T) {
	wte := `{"name": "wte", "shape": [4, 4], "offset": 0}`
	short := writeDump(t, "short.bin", nil, 10, wte)
	if err := os.WriteFile(short, make([]byte, 8), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, path, want string
	}{
		{"size", short, "has 8 bytes"},
		{"outside", writeDump(t, "out.bin", nil, 10, wte), `tensor "wte"`},
		{"missing keys", writeDump(t, "few.bin", nil, 16, wte), "missing key"},
		{"no manifest", filepath.Join(t.TempDir(), "w.bin"), "w.bin.json"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := models.NewGPT(rand.New(rand.NewPCG(1, 0)), dumpTiny)
			if err == nil {
				err = LoadDump(tc.path, m)
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("LoadDump: %v, want an error mentioning %q", err, tc.want)
			}
		})
	}
}
