package checkpoint

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
)

// The tests that check files against PyTorch run a script of testdata/
// with the system interpreter, which has PyTorch; they are skipped where
// it has not.

const python = "/usr/bin/python3"

// needTorch skips t unless python imports torch.
func needTorch(t *testing.T) {
	t.Helper()
	if out, err := exec.Command(python, "-c", "import torch").CombinedOutput(); err != nil {
		t.Skipf("PyTorch not available (%s -c 'import torch': %v: %s)", python, err, bytes.TrimSpace(out))
	}
}

// runTorch runs testdata/script with args (one thread each for OpenMP and
// OpenBLAS) and returns what it printed; a failure fails t with its
// output. With res non-nil it decodes the output, JSON, into res.
func runTorch(t *testing.T, res any, script string, args ...string) []byte {
	t.Helper()
	cmd := exec.Command(python, append([]string{filepath.Join("testdata", script)}, args...)...)
	cmd.Env = append(os.Environ(), "OMP_NUM_THREADS=1", "OPENBLAS_NUM_THREADS=1")
	out, err := cmd.Output()
	if err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			out = append(out, exit.Stderr...)
		}
		t.Fatalf("%s %v: %v\n%s", script, args, err, out)
	}
	if res != nil {
		if err := json.Unmarshal(out, res); err != nil {
			t.Fatalf("%s output: %v\n%s", script, err, out)
		}
	}
	return out
}

// intArgs are a script's arguments: the sizes, then the token ids.
func intArgs(sizes []int, ids []int64) []string {
	var args []string
	for _, v := range sizes {
		args = append(args, strconv.Itoa(v))
	}
	for _, id := range ids {
		args = append(args, strconv.FormatInt(id, 10))
	}
	return args
}
