package cohort_test

import (
	"encoding/json"

	"math"
	"os"
	"path/filepath"
	"sort"
	"testing"
)

// The golden suite replays PyTorch-computed cases (testdata/golden, made by
// make_goldens.py and make_transformer_goldens.py) through cohort and checks
// every output and gradient to |got − want| ≤ 1e-5 + 1e-4·|want|. A case
// whose op has no runner fails: nothing is skipped silently. Setting
// COHORT_GOLDEN_DIR runs every *.json there as well.

// goldenTensor is the JSON form {"shape": [...], "data": [...]}.
type goldenTensor struct {
	Shape []int     `json:"shape"`
	Data  []float64 `json:"data"`
}

type goldenCase struct {
	Name    string                     `json:"name"`
	Op      string                     `json:"op"`
	Attrs   map[string]json.RawMessage `json:"attrs"`
	Inputs  map[string]json.RawMessage `json:"inputs"`
	Outputs map[string]json.RawMessage `json:"outputs"`
	Grads   map[string]json.RawMessage `json:"grads"`
}

type goldenFile struct {
	Generator string       `json:"generator"`
	Cases     []goldenCase `json:"cases"`
}

// goldenRunner checks one case, reporting mismatches through t.
type goldenRunner func(t *testing.T, c *goldenCase)

// goldenRunners merges the runners of every area; an op registered twice
// is a test bug.
func goldenRunners(t *testing.T) map[string]goldenRunner {
	all := map[string]goldenRunner{}
	for _, part := range []map[string]goldenRunner{coreGoldenRunners(), optimGoldenRunners()} {
		for op, r := range part {
			if _, dup := all[op]; dup {
				t.Fatalf("golden: op %q registered twice", op)
			}
			all[op] = r
		}
	}
	return all
}

func TestGolden(t *testing.T) {
	runners := goldenRunners(t)
	dirs := []string{filepath.Join("testdata", "golden")}
	if d := os.Getenv("COHORT_GOLDEN_DIR"); d != "" {
		dirs = append(dirs, d)
	}
	for _, dir := range dirs {
		files, err := filepath.Glob(filepath.Join(dir, "*.json"))
		if err != nil {
			t.Fatal(err)
		}
		sort.Strings(files)
		if len(files) == 0 {
			t.Fatalf("golden: no *.json files in %s", dir)
		}
		passed := 0
		for _, f := range files {
			if filepath.Base(f) == "sampler.json" {
				continue // sampler goldens have their own format and test (package data)
			}
			gf := readGoldenFile(t, f)
			for i := range gf.Cases {
				c := &gf.Cases[i]
				ok := t.Run(filepath.Base(f)+"/"+c.Name, func(t *testing.T) {
					r, found := runners[c.Op]
					if !found {
						t.Fatalf("golden: no runner for op %q (case %s)", c.Op, c.Name)
					}
					r(t, c)
				})
				if ok {
					passed++
				}
			}
		}
		t.Logf("golden: %d cases passed from %s", passed, dir)
	}
}

func readGoldenFile(t *testing.T, path string) *goldenFile {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("golden: %v", err)
	}
	var gf goldenFile
	if err := json.Unmarshal(b, &gf); err != nil {
		t.Fatalf("golden: %s: %v", path, err)
	}
	return &gf
}

// decode unmarshals one field of a case, failing the test when absent.
func decode[T any](t *testing.T, m map[string]json.RawMessage, key string) T {
	t.Helper()
	var v T
	raw, ok := m[key]
	if !ok {
		t.Fatalf("golden: missing field %q", key)
	}
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatalf("golden: field %q: %v", key, err)
	}
	return v
}

// has reports whether key is present in m.
func has(m map[string]json.RawMessage, key string) bool { _, ok := m[key]; return ok }

// f32s converts golden float64 data to float32.
func f32s(d []float64) []float32 {
	out := make([]float32, len(d))
	for i, v := range d {
		out[i] = float32(v)
	}
	return out
}

// closeTo is the golden tolerance.
func closeTo(got, want float64) bool {
	return math.Abs(got-want) <= 1e-5+1e-4*math.Abs(want)
}

// checkClose compares got against want element-wise and reports the first
// few mismatches with their index.
func checkClose(t *testing.T, what string, got []float32, want goldenTensor) {
	t.Helper()
	if len(got) != len(want.Data) {
		t.Errorf("%s: got %d values, want %d (shape %v)", what, len(got), len(want.Data), want.Shape)
		return
	}
	bad := 0
	for i, w := range want.Data {
		if !closeTo(float64(got[i]), w) {
			if bad < 5 {
				t.Errorf("%s[%d] = %g, want %g", what, i, got[i], w)
			}
			bad++
		}
	}
	if bad > 5 {
		t.Errorf("%s: %d of %d values out of tolerance", what, bad, len(want.Data))
	}
}

func checkScalar(t *testing.T, what string, got float64, want float64) {
	t.Helper()
	if !closeTo(got, want) {
		t.Errorf("%s = %g, want %g", what, got, want)
	}
}
