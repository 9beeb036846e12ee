package gemm

import (
	"fmt"
	"os"
	"runtime"
	"slices"
	"testing"
	"time"
)

func cpuRate(elems int, f func()) float64 {
	var rs []float64
	for r := 0; r < 7; r++ {
		f()
		st := threadCPU()
		it := 0
		for threadCPU()-st < 20*time.Millisecond {
			f()
			it++
		}
		rs = append(rs, float64(elems)*float64(it)/(threadCPU()-st).Seconds()/1e9)
	}
	slices.Sort(rs)
	return rs[3]
}

func TestPackRate(t *testing.T) {
	if os.Getenv("PACKRATE") == "" {
		t.Skip()
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	src := make([]float32, 1024*1024)
	dst := make([]float32, 1024*1024+4096)
	for _, ar := range []*arch{avx512Arch(), avx512WideArch()} {
		for _, trans := range []bool{false, true} {
			bn := cpuRate(784*1024, func() {
				for pc := 0; pc < 784; pc += ar.kc {
					kc := min(ar.kc, 784-pc)
					if trans {
						ar.packB(dst, src[pc:], 784, true, kc, 1024)
					} else {
						ar.packB(dst, src[pc*1024:], 1024, false, kc, 1024)
					}
				}
			})
			an := cpuRate(64*1024, func() {
				for pc := 0; pc < 1024; pc += ar.kc {
					kc := min(ar.kc, 1024-pc)
					if trans {
						ar.packA(dst, src[pc*64:], 64, true, 64, kc)
					} else {
						ar.packA(dst, src[pc:], 1024, false, 64, kc)
					}
				}
			})
			fmt.Printf("%dx%d trans=%v: packB %.1f Gelem/s, packA %.1f Gelem/s\n", ar.mr, ar.nr, trans, bn, an)
		}
	}
	fmt.Printf("copy %.1f Gelem/s\n", cpuRate(784*1024, func() { copy(dst[:784*1024], src) }))
}
