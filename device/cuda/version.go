package cuda

import (
	"fmt"
	"regexp"
	"strconv"
)

// ptxISA maps each PTX ISA version to the CUDA release that introduced it
// (PTX ISA reference, "Release notes"): NVRTC of CUDA X emits the ISA of
// X, and a driver for CUDA X JIT-compiles ISAs up to X's. Versions are
// encoded like cuDriverGetVersion: 1000·major + 10·minor.
var ptxISA = []struct{ isa, cuda int }{
	{6000, 9000}, {6010, 9010}, {6020, 9020}, {6030, 10000}, {6040, 10010}, {6050, 10020},
	{7000, 11000}, {7010, 11010}, {7020, 11020}, {7030, 11030}, {7040, 11040}, {7050, 11050},
	{7060, 11060}, {7070, 11070}, {7080, 11080},
	{8000, 12000}, {8010, 12010}, {8020, 12020}, {8030, 12030}, {8040, 12040}, {8050, 12050},
	{8050, 12060}, {8060, 12070}, {8070, 12080}, {8080, 12090},
	{9000, 13000}, {9010, 13010},
}

// VersionString formats a cuDriverGetVersion-style number: 12020 → "12.2".
func VersionString(v int) string { return fmt.Sprintf("%d.%d", v/1000, v%1000/10) }

var versionRE = regexp.MustCompile(`(?m)^\s*\.version\s+([0-9]+)\.([0-9]+)`)

// PTXVersion returns the ISA version of a PTX text's .version directive,
// encoded as 1000·major + 10·minor, or 0 when there is none.
func PTXVersion(ptx string) int {
	m := versionRE.FindStringSubmatch(ptx)
	if m == nil {
		return 0
	}
	major, _ := strconv.Atoi(m[1])
	minor, _ := strconv.Atoi(m[2])
	return 1000*major + 10*minor
}

// VersionError is PTX newer than the driver can load.
type VersionError struct {
	PTX      int // the PTX ISA version (1000·major + 10·minor)
	NeedCUDA int // the CUDA release that introduced it (0 if unknown)
	Driver   int // cuDriverGetVersion
}

func (e *VersionError) Error() string {
	made, need := "a CUDA newer than "+VersionString(ptxISA[len(ptxISA)-1].cuda), "newer than CUDA "+VersionString(ptxISA[len(ptxISA)-1].cuda)
	if e.NeedCUDA != 0 {
		made, need = "NVRTC "+VersionString(e.NeedCUDA), "for CUDA "+VersionString(e.NeedCUDA)+" or newer"
	}
	return fmt.Sprintf("cuda: the kernels' PTX is ISA %s (as %s emits), which needs a driver %s; this driver supports CUDA %s (cuDriverGetVersion %d): update the NVIDIA driver, or compile the kernels with an NVRTC no newer than the driver (COHORT_CUDA_LIB_DIR)",
		VersionString(e.PTX), made, need, VersionString(e.Driver), e.Driver)
}

// CheckPTX returns a *VersionError when a driver of version driver (as
// cuDriverGetVersion) is too old for ptx's ISA; nil when it can load it or
// when either version is unknown (0).
func CheckPTX(ptx string, driver int) error {
	isa := PTXVersion(ptx)
	if isa == 0 || driver == 0 {
		return nil
	}
	need := 0
	for _, v := range ptxISA {
		if v.isa >= isa {
			need = v.cuda
			break
		}
	}
	last := ptxISA[len(ptxISA)-1].cuda
	switch {
	case need == 0 && driver > last:
		return nil // both newer than this table: let the driver decide
	case need == 0, driver < need:
		return &VersionError{PTX: isa, NeedCUDA: need, Driver: driver}
	}
	return nil
}
