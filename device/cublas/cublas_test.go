package cublas_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cohortml/cohort/device/cublas"
	"github.com/cohortml/cohort/device/cuda/cudatest"
	"github.com/cohortml/cohort/device/internal/libfind"
)

// load loads cuBLAS or skips, naming what is missing.
var load = cudatest.Loader("cuBLAS", cublas.Load, cublas.ErrNotFound)

func TestLoadAndBind(t *testing.T) {
	l := load(t)
	if l.Major < 11 {
		t.Errorf("cuBLAS %s: want 11 or newer", l.Version())
	}
	if l.LtVersion/10000 != uint64(l.Major) {
		t.Errorf("cuBLASLt version %d does not match cuBLAS %s", l.LtVersion, l.Version())
	}
	if !strings.Contains(filepath.Base(l.Path), "libcublas.so") || !strings.Contains(filepath.Base(l.LtPath), "libcublasLt.so") {
		t.Errorf("paths %q, %q", l.Path, l.LtPath)
	}
	t.Logf("cuBLAS %s from %s, cuBLASLt %d from %s", l.Version(), l.Path, l.LtVersion, l.LtPath)
}

func TestMissingLibraryOneLine(t *testing.T) {
	empty := t.TempDir()
	_, err := cublas.LoadEnv(libfind.Env{LibDir: empty})
	if !errors.Is(err, cublas.ErrNotFound) {
		t.Fatalf("err = %v, want ErrNotFound", err)
	}
	if msg := err.Error(); strings.Contains(msg, "\n") || msg != "cublas: libcublas not found (looked in "+empty+")" {
		t.Errorf("error %q", msg)
	}
}

// A directory holding libcublas but not libcublasLt is reported with the
// loader's error for the missing file.
func TestMissingLtBeside(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "libcublas.so.12"), []byte("not an ELF file"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := cublas.LoadEnv(libfind.Env{LibDir: dir})
	if !errors.Is(err, cublas.ErrNotFound) || !strings.Contains(err.Error(), "libcublasLt.so.12") {
		t.Errorf("err = %v, want it to name libcublasLt.so.12", err)
	}
}

func TestGemmChecks(t *testing.T) {
	var h *cublas.Handle // the checks run before the handle is used
	for name, g := range map[string]cublas.Gemm{
		"empty":    {M: 0, N: 4, K: 4, LDA: 4, LDB: 4, LDC: 4},
		"negative": {M: -1, N: 4, K: 4, LDA: 4, LDB: 4, LDC: 4},
		"too-big":  {M: 1 << 31, N: 4, K: 4, LDA: 4, LDB: 4, LDC: 4},
	} {
		if err := h.Sgemm(g); err == nil || !strings.HasPrefix(err.Error(), "cublas: gemm: ") {
			t.Errorf("%s: Sgemm: %v", name, err)
		}
		if err := h.GemmEx(g); err == nil {
			t.Errorf("%s: GemmEx: no error", name)
		}
	}
}
