//go:build amd64 && !linux

package gemm

import (
	"fmt"
	"runtime"
)

// requestTileData: the tile state is requested through Linux's
// arch_prctl, which other systems lack; the AMX kernel is Linux-only.
func requestTileData() error {
	return fmt.Errorf("the AMX tile state is requested through Linux's arch_prctl, not available on %s", runtime.GOOS)
}
