package cluster

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/cohortml/cohort/launch/launchtest"
)

// bins are cohort, mnist and collcheck, built once on first use.
var (
	buildOnce sync.Once
	binDir    string
	buildErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// bin returns the path of one of the built programs.
func bin(t *testing.T, name string) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "cohort-cluster-")
		if err != nil {
			buildErr = err
			return
		}
		binDir = dir
		buildErr = launchtest.Build(dir, "github.com/cohortml/cohort/cmd/cohort", "github.com/cohortml/cohort/examples/mnist", "./testdata/collcheck")
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return filepath.Join(binDir, name)
}

// missing returns the first of tools not in PATH (or its sbin).
func missing(tools ...string) string {
	for _, tl := range tools {
		if _, err := lookTool(tl); err != nil {
			return tl
		}
	}
	return ""
}

func lookTool(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, d := range []string{"/usr/sbin", "/sbin"} {
		p := filepath.Join(d, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s not found", name)
}
