package kernels

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
)

var update = flag.Bool("update", false, "rewrite testdata/generated/*.cu.golden from the sources")

// TestGenerated compares each family's generated source with its golden
// copy, so a change to a kernel or to the generator shows as a diff in
// review without a GPU. -update rewrites the goldens.
func TestGenerated(t *testing.T) {
	for _, f := range Families {
		t.Run(f, func(t *testing.T) {
			src, err := Source(f)
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join("testdata", "generated", f+".cu.golden")
			if *update {
				if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test -update to create it)", err)
			}
			if src != string(want) {
				t.Errorf("generated %s differs from %s (go test -update rewrites it; review the diff):\n%s", f, path, firstDiff(string(want), src))
			}
		})
	}
	// Every family file is listed, and nothing else is in cuda/.
	entries, err := sources.ReadDir("cuda")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), ".cu")
		if ok && !slices.Contains(Families, name) {
			t.Errorf("cuda/%s is not in Families", e.Name())
		}
	}
}

func firstDiff(a, b string) string {
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	for i := 0; i < max(len(al), len(bl)); i++ {
		var x, y string
		if i < len(al) {
			x = al[i]
		}
		if i < len(bl) {
			y = bl[i]
		}
		if x != y {
			return fmt.Sprintf("line %d:\n- %s\n+ %s", i+1, x, y)
		}
	}
	return "(no line differs)"
}

// TestTableMatchesSource parses every extern "C" __global__ signature of
// the generated sources and checks the table against them: every entry
// names a function of its family with the same parameters (types and
// names, in order), and every function has an entry.
func TestTableMatchesSource(t *testing.T) {
	table := Table()
	byName := map[string]Kernel{}
	for _, k := range table {
		if _, dup := byName[k.Name]; dup {
			t.Errorf("kernel %s listed twice", k.Name)
		}
		byName[k.Name] = k
	}
	seen := map[string]bool{}
	for _, f := range Families {
		src, err := Source(f)
		if err != nil {
			t.Fatal(err)
		}
		sigs, err := signatures(src)
		if err != nil {
			t.Fatal(err)
		}
		if len(sigs) == 0 {
			t.Errorf("family %s: no extern \"C\" __global__ functions", f)
		}
		for _, s := range sigs {
			k, ok := byName[s.Name]
			switch {
			case !ok:
				t.Errorf("%s.cu: %s has no table entry", f, s.Name)
			case k.Family != f:
				t.Errorf("%s: table says family %s, defined in %s.cu", s.Name, k.Family, f)
			case !slices.Equal(k.Params, s.Params):
				t.Errorf("%s: table parameters\n  %v\nsource\n  %v", s.Name, k.Params, s.Params)
			}
			seen[s.Name] = true
		}
	}
	for _, k := range table {
		if !seen[k.Name] {
			t.Errorf("table entry %s names no function of %s.cu", k.Name, k.Family)
		}
		if k.Launch == nil {
			t.Errorf("%s has no Launch", k.Name)
		}
	}
	t.Logf("%d kernels in %d families", len(table), len(Families))
}

// TestTemplatedPairs checks that each templated kernel exists in both
// storage types with the same parameters but for the element type.
func TestTemplatedPairs(t *testing.T) {
	for _, k := range Table() {
		if k.DType != F32.Name {
			continue
		}
		base := strings.TrimSuffix(k.Name, "_f32")
		b, ok := Lookup(base + "_bf16")
		if !ok {
			t.Errorf("%s has no bf16 twin", k.Name)
			continue
		}
		for i, p := range k.Params {
			q := b.Params[i]
			if q.Name != p.Name || (q.Type != p.Type && q.Type != strings.Replace(p.Type, "float", "bf16", 1)) {
				t.Errorf("%s parameter %d: %v vs %v", base, i, p, q)
			}
		}
	}
}

func TestInstantiate(t *testing.T) {
	got, err := Instantiate("a\n// cohort:dtypes\nfloatX f_X(floatX x) { return round_X(x); }\n// cohort:end\nb\n")
	if err != nil {
		t.Fatal(err)
	}
	want := "a\nfloat f_f32(float x) { return round_f32(x); }\n\nbf16 f_bf16(bf16 x) { return round_bf16(x); }\nb\n"
	if got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
	for _, tc := range []struct{ name, src, err string }{
		{"unclosed", "// cohort:dtypes\nx\n", "without"},
		{"stray_end", "x\n// cohort:end\n", "without"},
		{"nested", "// cohort:dtypes\n// cohort:dtypes\n// cohort:end\n", "nested"},
		{"type_outside", "floatX y;\n", "outside a template block"},
		{"name_outside", "void g_X();\n", "outside a template block"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := Instantiate(tc.src); err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("error %v, want one containing %q", err, tc.err)
			}
		})
	}
	if _, err := Source("nosuch"); err == nil || !strings.Contains(err.Error(), `no family "nosuch"`) {
		t.Errorf("Source(nosuch): %v", err)
	}
}

func TestParseParam(t *testing.T) {
	for in, want := range map[string]Param{
		"const  float *x":      {"const float*", "x"},
		"floatX* out":          {"floatX*", "out"},
		"long long n":          {"long long", "n"},
		"const long long* idx": {"const long long*", "idx"},
		" int\tcausal ":        {"int", "causal"},
	} {
		if got, err := parseParam(in); err != nil || got != want {
			t.Errorf("parseParam(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "x", "*"} {
		if _, err := parseParam(bad); err == nil {
			t.Errorf("parseParam(%q) succeeded", bad)
		}
	}
}

// TestLaunch is a transcript of launch geometries (testdata/launch):
//
//	launch kernel=NAME [FIELD=VALUE ...]
//
// prints the geometry for the Problem with those fields, or the error.
// "limits" checks every kernel at GPT-2 small's sizes against the
// hardware's limits.
func TestLaunch(t *testing.T) {
	datadriven.RunTest(t, filepath.Join("testdata", "launch"), func(t *testing.T, d *datadriven.TestData) string {
		switch d.Cmd {
		case "launch":
			var name string
			var p Problem
			for _, a := range d.CmdArgs {
				if a.Key == "kernel" {
					name = a.Vals[0]
					continue
				}
				v, err := strconv.ParseInt(a.Vals[0], 10, 64)
				if err != nil {
					d.Fatalf(t, "%s: %v", a.Key, err)
				}
				if !setField(&p, a.Key, v) {
					d.Fatalf(t, "unknown Problem field %s", a.Key)
				}
			}
			k, ok := Lookup(name)
			if !ok {
				d.Fatalf(t, "no kernel %s", name)
			}
			g, err := k.Launch(p)
			if err != nil {
				return "error: " + err.Error() + "\n"
			}
			return fmt.Sprintf("grid %v block %v (%d threads) shared %d\n", g.Grid, g.Block, g.Threads(), g.SharedBytes)
		case "limits":
			var b strings.Builder
			for _, k := range Table() {
				g, err := k.Launch(gpt2Problem)
				if err != nil {
					fmt.Fprintf(&b, "%s: %v\n", k.Name, err)
					continue
				}
				if g.Threads() > 1024 || g.Threads()%32 != 0 || g.SharedBytes > maxSharedBytes || g.Grid[0] < 1 || g.Grid[0] > 1<<31-1 || g.Grid[1] > 65535 {
					fmt.Fprintf(&b, "%s: %+v out of limits\n", k.Name, g)
				}
			}
			return fmt.Sprintf("%d kernels within limits\n%s", len(Table()), b.String())
		}
		d.Fatalf(t, "unknown command %s", d.Cmd)
		return ""
	})
}

// gpt2Problem is GPT-2 small's training step at batch 16 × 1024 with every
// field set, for the limits check.
var gpt2Problem = Problem{
	N: 124439808, Rows: 16 * 1024, Cols: 768, B: 16, T: 1024, NHead: 12, HeadDim: 64, Segments: 16 * 1024,
	Parts: 1024, Planes: 16 * 6, C: 6, NB: 16, H: 28, W: 28, OH: 14, OW: 14, KH: 5, KW: 5,
}

func setField(p *Problem, key string, v int64) bool {
	ints := map[string]*int{
		"Rows": &p.Rows, "Cols": &p.Cols, "B": &p.B, "T": &p.T, "NHead": &p.NHead, "HeadDim": &p.HeadDim,
		"Segments": &p.Segments, "Parts": &p.Parts, "Planes": &p.Planes, "C": &p.C, "NB": &p.NB,
		"H": &p.H, "W": &p.W, "OH": &p.OH, "OW": &p.OW, "KH": &p.KH, "KW": &p.KW,
	}
	if key == "N" {
		p.N = v
		return true
	}
	f, ok := ints[key]
	if ok {
		*f = int(v)
	}
	return ok
}
