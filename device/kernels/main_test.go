package kernels_test

import (
	"flag"
	"fmt"
	"os"
	"sort"
	"sync"
	"testing"

	"github.com/cohortml/cohort/device/kernels"
)

// launched records the kernels the emulator ran, so that a full run can
// check that every kernel of the table was run against its CPU twin.
var launched sync.Map

func TestMain(m *testing.M) {
	code := m.Run()
	for _, d := range emuDirs.list {
		os.RemoveAll(d)
	}
	run := flag.Lookup("test.run")
	if code == 0 && !testing.Short() && run != nil && run.Value.String() == "" {
		var missing []string
		ran := 0
		for _, k := range kernels.Table() {
			if _, ok := launched.Load(k.Name); ok {
				ran++
			} else {
				missing = append(missing, k.Name)
			}
		}
		if ran > 0 && len(missing) > 0 { // ran == 0: the emulator was skipped
			sort.Strings(missing)
			fmt.Fprintf(os.Stderr, "FAIL: kernels never run on the emulator: %v\n", missing)
			code = 1
		}
	}
	os.Exit(code)
}
