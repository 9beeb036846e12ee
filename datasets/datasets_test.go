package datasets

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cohortml/cohort/data"
)

func TestCSV(t *testing.T) {
	const table = "sepal,petal,species\n5.1, 3.5,0\n4.9,3.0,1\n6.2,2.9,2\n"
	cases := []struct {
		name       string
		opts       CSVOptions
		text       string
		features   int
		firstX     []float32
		labels     []int64
		targets    []float32
		labelName  string
		columnsFor []string
	}{
		{"label by name", CSVOptions{Header: true, Label: "species"}, table, 2, []float32{5.1, 3.5}, []int64{0, 1, 2}, nil, "species", []string{"sepal", "petal"}},
		{"label last", CSVOptions{Header: true, LabelColumn: -1}, table, 2, []float32{5.1, 3.5}, []int64{0, 1, 2}, nil, "species", []string{"sepal", "petal"}},
		{"label first, no header", CSVOptions{}, "1,0.5,2\n0,1.5,3\n", 2, []float32{0.5, 2}, []int64{1, 0}, nil, "col0", []string{"col1", "col2"}},
		{"regression", CSVOptions{Header: true, Label: "sepal", Regression: true}, table, 2, []float32{3.5, 0}, nil, []float32{5.1, 4.9, 6.2}, "sepal", []string{"petal", "species"}},
		{"no label, semicolons", CSVOptions{NoLabel: true, Comma: ';'}, "1;2\n3;4\n", 2, []float32{1, 2}, nil, nil, "", []string{"col0", "col1"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d, err := ReadCSV(strings.NewReader(c.text), "t.csv", c.opts)
			if err != nil {
				t.Fatal(err)
			}
			if d.Features != c.features || d.LabelName != c.labelName || !slices.Equal(d.Columns, c.columnsFor) {
				t.Fatalf("features %d label %q columns %v", d.Features, d.LabelName, d.Columns)
			}
			s, err := d.Get(0)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(s.X, c.firstX) || !slices.Equal(d.Labels, c.labels) || !slices.Equal(d.Targets, c.targets) {
				t.Fatalf("X[0] %v labels %v targets %v; want %v %v %v", s.X, d.Labels, d.Targets, c.firstX, c.labels, c.targets)
			}
			if _, err := d.Get(d.Len()); err == nil {
				t.Fatal("Get(Len) succeeded")
			}
		})
	}
}

func TestCSVErrors(t *testing.T) {
	cases := []struct {
		name string
		opts CSVOptions
		text string
		want string
	}{
		{"bad number", CSVOptions{Header: true, Label: "y"}, "a,b,y\n1,2,0\n3,x7,1\n", `t.csv: row 2 (line 3), column 2 ("b"): bad number "x7"`},
		{"empty field", CSVOptions{}, "0,1\n1,\n", `row 2 (line 2), column 2 ("col1"): empty field`},
		{"nan", CSVOptions{}, "0,NaN\n", `row 1 (line 1), column 2 ("col1"): "NaN" is not a finite number`},
		{"overflow", CSVOptions{}, "0,1e39\n", "overflows float32"},
		{"fractional label", CSVOptions{LabelColumn: -1}, "1,2.5\n", `column 2 ("col1"): label "2.5" is not a class index`},
		{"negative label", CSVOptions{}, "-1,2\n", "is not a class index"},
		{"ragged", CSVOptions{}, "0,1,2\n1,2\n", "line 2: wrong number of fields"},
		{"unknown label name", CSVOptions{Header: true, Label: "z"}, "a,b\n1,2\n", `no column named "z"`},
		{"label without header", CSVOptions{Label: "z"}, "1,2\n", "Header is not set"},
		{"label column", CSVOptions{LabelColumn: 5}, "1,2\n", "label column 5 outside the 2 columns"},
		{"empty", CSVOptions{}, "", "empty file"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := ReadCSV(strings.NewReader(c.text), "t.csv", c.opts)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err %v, want one containing %q", err, c.want)
			}
		})
	}
	if _, err := LoadCSV(filepath.Join(t.TempDir(), "absent.csv"), CSVOptions{}); err == nil || !strings.Contains(err.Error(), "absent.csv") {
		t.Fatalf("missing file: err %v", err)
	}
}

func TestText(t *testing.T) {
	d, err := NewText([]byte("hello world"), 4, 3)
	if err != nil {
		t.Fatal(err)
	}
	// Starts 0, 3, 6 (6+4+1 = 11 ≤ 11).
	if d.Len() != 3 {
		t.Fatalf("Len %d, want 3", d.Len())
	}
	s, err := d.Get(2)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(s.X, []float32{'w', 'o', 'r', 'l'}) || !slices.Equal(s.Labels, []int64{'o', 'r', 'l', 'd'}) {
		t.Fatalf("window 2: X %v labels %v", s.X, s.Labels)
	}
	if _, err := d.Window(7); err == nil || !strings.Contains(err.Error(), "window start 7 outside [0, 6]") {
		t.Fatalf("Window(7): err %v", err)
	}
	for _, c := range []struct {
		text          string
		context, step int
		want          string
	}{
		{"abc", 3, 1, "3 bytes is too short"},
		{"abcd", 0, 1, "context length 0"},
		{"abcd", 2, -1, "stride -1"},
	} {
		if _, err := NewText([]byte(c.text), c.context, c.step); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("NewText(%q, %d, %d): err %v, want %q", c.text, c.context, c.step, err, c.want)
		}
	}
}

// TestOpticksPathEnv checks that $OPTICKS, when set, names the text, and
// that a missing file there is an error naming the variable.
func TestOpticksPathEnv(t *testing.T) {
	p := filepath.Join(t.TempDir(), "opticks.txt")
	if err := os.WriteFile(p, []byte("Of the Colours of Bodies"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("OPTICKS", p)
	if got, err := OpticksPath(context.Background()); err != nil || got != p {
		t.Errorf("OpticksPath with $OPTICKS=%s: %q, %v", p, got, err)
	}
	t.Setenv("OPTICKS", p+".missing")
	if _, err := OpticksPath(context.Background()); err == nil || !strings.Contains(err.Error(), "$OPTICKS") || !strings.Contains(err.Error(), "opticks.txt.missing") {
		t.Errorf("OpticksPath with a missing $OPTICKS file: %v, want an error naming the variable and the file", err)
	}
}

// opticksOrSkip returns the path of the Opticks text, or skips the test.
func opticksOrSkip(t *testing.T) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	path, err := OpticksPath(ctx)
	if err != nil {
		t.Skipf("Opticks text not available: %v", err)
	}
	return path
}

func TestTextOpticks(t *testing.T) {
	path := opticksOrSkip(t)
	d, err := LoadText(path, 64, 0)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(d.Bytes); n < 500_000 || d.Len() != (n-65)/64+1 {
		t.Fatalf("%d bytes, %d windows", n, d.Len())
	}
	// A loader over the text: batches of [B, 64] token ids and [B, 64]
	// next-byte targets that are the ids shifted by one.
	s, _ := data.NewDistributedSampler(d.Len(), 2, 1, true, 0, true)
	bs, _ := data.NewBatchSampler(s, 32, true)
	l, err := data.NewLoader(d, bs, data.Options{Workers: 2})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n := 0
	for b, err := range l.Batches(ctx) {
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(b.X.Shape(), []int{32, 64}) || !slices.Equal(b.Y.Shape(), []int{32, 64}) {
			t.Fatalf("shapes X %v Y %v", b.X.Shape(), b.Y.Shape())
		}
		x, y := b.X.Data(), b.Labels
		for i := 0; i < 32; i++ {
			for j := 1; j < 64; j++ {
				if int64(x[i*64+j]) != y[i*64+j-1] {
					t.Fatalf("row %d: targets are not the inputs shifted by one", i)
				}
			}
		}
		n++
	}
	if n != bs.NumBatches() {
		t.Fatalf("%d batches, want %d", n, bs.NumBatches())
	}
}

type syntheticGolden struct {
	Cases []struct {
		N         int       `json:"n"`
		Shape     []int     `json:"shape"`
		Classes   int       `json:"classes"`
		Seed      uint64    `json:"seed"`
		X         []float32 `json:"x"`
		Y         []int64   `json:"y"`
		XHead     []float32 `json:"x_head"`
		XTail     []float32 `json:"x_tail"`
		XSum      float64   `json:"x_sum"`
		XSumSq    float64   `json:"x_sumsq"`
		YHead     []int64   `json:"y_head"`
		YHist     []int     `json:"y_hist"`
		YWeighted int64     `json:"y_weighted_sum"`
	} `json:"cases"`
}

// readGolden decodes the JSON file testdata/name.
func readGolden[T any](t *testing.T, name string) T {
	t.Helper()
	var g T
	raw, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &g); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return g
}

// TestSyntheticMatchesTorch checks NewSynthetic against PyTorch's randn and
// randint (testdata/synthetic.json, made by make_synthetic.py): labels
// exactly, features to 2e-6.
func TestSyntheticMatchesTorch(t *testing.T) {
	g := readGolden[syntheticGolden](t, "synthetic.json")
	closeTo := func(t *testing.T, what string, got, want []float32) {
		t.Helper()
		if len(got) != len(want) {
			t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
		}
		for i := range got {
			if d := math.Abs(float64(got[i] - want[i])); d > 2e-6 {
				t.Fatalf("%s[%d] = %.9g, torch %.9g", what, i, got[i], want[i])
			}
		}
	}
	for _, c := range g.Cases {
		name := "n=" + itoa(c.N) + "/seed=" + itoa(int(c.Seed))
		t.Run(name, func(t *testing.T) {
			if c.N > 1000 && testing.Short() {
				t.Skip("large case in -short mode")
			}
			s, err := NewSynthetic(c.N, c.Shape, c.Classes, c.Seed)
			if err != nil {
				t.Fatal(err)
			}
			if c.X != nil {
				closeTo(t, "x", s.X, c.X)
				if !slices.Equal(s.Labels, c.Y) {
					t.Fatalf("labels %v, torch %v", s.Labels, c.Y)
				}
				return
			}
			closeTo(t, "x head", s.X[:64], c.XHead)
			closeTo(t, "x tail", s.X[len(s.X)-64:], c.XTail)
			var sum, sumsq float64
			for _, v := range s.X {
				sum += float64(v)
				sumsq += float64(v) * float64(v)
			}
			// Elementwise differences reach 2e-6 and are slightly biased
			// (PyTorch's single-precision log/sin/cos): over 47M values the
			// sums differ by about 1. A wrong stream misses by thousands.
			if math.Abs(sum-c.XSum) > 5 || math.Abs(sumsq-c.XSumSq) > 5 {
				t.Fatalf("sum %.6f sumsq %.6f, torch %.6f %.6f", sum, sumsq, c.XSum, c.XSumSq)
			}
			hist := make([]int, c.Classes)
			var ws int64
			for i, y := range s.Labels {
				hist[y]++
				ws += int64(i+1) * y
			}
			if !slices.Equal(s.Labels[:64], c.YHead) || !slices.Equal(hist, c.YHist) || ws != c.YWeighted {
				t.Fatalf("labels differ from torch: head %v hist %v weighted %d", s.Labels[:8], hist, ws)
			}
		})
	}
	for _, bad := range []struct {
		n       int
		shape   []int
		classes int
	}{{-1, []int{2}, 2}, {2, []int{0}, 2}, {2, []int{2}, 0}, {1 << 30, []int{784}, 10}} {
		if _, err := NewSynthetic(bad.n, bad.shape, bad.classes, 0); err == nil {
			t.Errorf("NewSynthetic(%d, %v, %d) succeeded", bad.n, bad.shape, bad.classes)
		}
	}
}

func itoa(i int) string { return strconv.Itoa(i) }
