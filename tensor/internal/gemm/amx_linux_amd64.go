//go:build amd64 && linux

package gemm

import (
	"fmt"
	"syscall"
)

// Linux's arch_prctl codes for dynamically enabled XSAVE state (5.16+).
const (
	archReqXCompPerm  = 0x1023
	xfeatureXTileData = 18
)

// requestTileData asks Linux for permission to use the AMX tile data
// state; until it is granted the first tile instruction faults. The
// permission covers every thread of the process.
func requestTileData() error {
	if _, _, e := syscall.RawSyscall(syscall.SYS_ARCH_PRCTL, archReqXCompPerm, xfeatureXTileData, 0); e != 0 {
		return fmt.Errorf("Linux refused the AMX tile state: arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA): %v (Linux 5.16 or later grants it)", e)
	}
	return nil
}
